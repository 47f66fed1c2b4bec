package server

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/yamldiff"
)

// InputChanges are the inputs that changed from one kept artifact to another, one line each
// ("web.tag 1.4.2 → 1.4.3"); none when either was rendered before inputs were recorded. Values
// read from Secrets are masked in the history already; a value that holds one of the
// KCLArtifact's Secret values all the same (a ConfigMap copying one) is masked as the diff
// masks it in the objects. Each line is escaped to one line of text.
func InputChanges(from, to kclv1.ArtifactHistoryEntry, sensitive []string) []string {
	changes := arguments.Changes(from.Inputs, to.Inputs)
	lines := make([]string, 0, len(changes))
	for _, c := range changes {
		c.From, c.To = maskSensitive(c.From, sensitive), maskSensitive(c.To, sensitive)
		lines = append(lines, c.String())
	}
	return lines
}

// maskSensitive is s with the Secret values in it replaced as yamldiff replaces them.
func maskSensitive(s string, sensitive []string) string {
	if len(sensitive) == 0 || s == "" {
		return s
	}
	o := yamldiff.MaskValues(&unstructured.Unstructured{Object: map[string]any{"v": s}}, sensitive)
	return o.Object["v"].(string)
}

// inputsComment is InputChanges as comment lines of the diff, after the health of both ends.
func inputsComment(from, to kclv1.ArtifactHistoryEntry, sensitive []string) string {
	var s string
	for _, l := range InputChanges(from, to, sensitive) {
		s += "# input: " + l + "\n"
	}
	return s
}
