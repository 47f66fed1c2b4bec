package server

import (
	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputchange"
)

// InputChanges are the inputs that changed from one kept artifact to another, one line each
// ("web.tag 1.4.2 → 1.4.3"); none when either was rendered before inputs were recorded. Values
// read from Secrets are masked in the history already; a value that holds one of the
// KCLArtifact's Secret values all the same (a ConfigMap copying one) is masked as the diff
// masks it in the objects. Each line is escaped to one line of text.
func InputChanges(from, to kclv1.ArtifactHistoryEntry, sensitive []string) []string {
	changes := inputchange.Changes(from.Inputs, to.Inputs)
	lines := make([]string, 0, len(changes))
	for _, c := range changes {
		lines = append(lines, c.Mask(sensitive).String())
	}
	return lines
}

// inputsComment is InputChanges as comment lines of the diff, after the health of both ends.
func inputsComment(from, to kclv1.ArtifactHistoryEntry, sensitive []string) string {
	var s string
	for _, l := range InputChanges(from, to, sensitive) {
		s += "# input: " + l + "\n"
	}
	return s
}
