// Package inputchange says what changed in the inputs of two artifacts ("web.tag 1.4.2 →
// 1.4.3"), for the NewArtifact event, `flux kcl history`, the artifact server's diff and the
// browser view alike. It links nothing but the API types: the flux plugin uses it and must not
// link the KCL engine.
package inputchange

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

// Masked stands for a value read from a Secret wherever inputs are shown.
const Masked = "***"

// Change is an input that differs between two artifacts; From or To is empty when the input
// was added or removed.
type Change struct {
	Name, From, To string
	Added, Removed bool
}

// Changes lists the inputs that differ from one history entry's to the next's, by name. Entries
// recorded before inputs were (nil) compare as unknown: no change is claimed.
func Changes(from, to []kclv1.InputValue) []Change {
	if from == nil || to == nil {
		return nil
	}
	old := map[string]string{}
	for _, v := range from {
		old[v.Name] = v.Value
	}
	var out []Change
	for _, v := range to {
		prev, ok := old[v.Name]
		switch {
		case !ok:
			out = append(out, Change{Name: v.Name, To: v.Value, Added: true})
		case prev != v.Value:
			out = append(out, Change{Name: v.Name, From: prev, To: v.Value})
		}
		delete(old, v.Name)
	}
	for name, prev := range old {
		out = append(out, Change{Name: name, From: prev, Removed: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lines are the inputs that changed from one kept artifact to another, one line each
// ("web.tag 1.4.2 → 1.4.3"); none when either was rendered before inputs were recorded. Values
// read from Secrets are masked in the history already; a value that holds one of the
// KCLArtifact's Secret values all the same (a ConfigMap copying one) is masked as the diff
// masks it in the objects. Each line is escaped to one line of text.
func Lines(from, to kclv1.ArtifactHistoryEntry, sensitive []string) []string {
	changes := Changes(from.Inputs, to.Inputs)
	lines := make([]string, 0, len(changes))
	for _, c := range changes {
		lines = append(lines, c.Mask(sensitive).String())
	}
	return lines
}

// Mask replaces each of values found in the change's values with Masked: an input that copies a
// Secret's value (a ConfigMap holding it) is shown masked as well.
func (c Change) Mask(values []string) Change {
	for _, v := range values {
		if v != "" {
			c.From, c.To = strings.ReplaceAll(c.From, v, Masked), strings.ReplaceAll(c.To, v, Masked)
		}
	}
	return c
}

// String is "web.tag 1.4.2 → 1.4.3", each value cut and escaped to one line.
func (c Change) String() string {
	short := func(s string) string { return termsafe.Line(Cut(s, 64)) }
	switch {
	case c.Added:
		return c.Name + " = " + short(c.To) + " (new)"
	case c.Removed:
		return c.Name + " removed"
	case c.From == Masked && c.To == Masked:
		return c.Name + " changed"
	}
	return c.Name + " " + short(c.From) + " → " + short(c.To)
}

// Text joins at most n changes, counting the rest.
func Text(changes []Change, n int) string {
	var parts []string
	for i, c := range changes {
		if i == n {
			parts = append(parts, fmt.Sprintf("… (%d more)", len(changes)-n))
			break
		}
		parts = append(parts, c.String())
	}
	return strings.Join(parts, ", ")
}

// Cut shortens s to at most n bytes, on a rune boundary, marking the cut.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n-len("…")]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}
