package fluxkcl

import (
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

// The plugin says input changes as the controller's NewArtifact event, the artifact server's diff
// and the browser view do (arguments.Changes and ChangeText), with a copy of their few lines:
// internal/arguments links the KCL engine through internal/render, which the plugin must not
// (test/fluxplugin's TestPluginDoesNotLinkTheEngine). TestInputChangesSayWhatTheControllerSays
// keeps the copy saying the same.

// maskedInput stands for a value read from a Secret in status.history[].inputs.
const maskedInput = "***"

// inputChange is an input that differs between two history entries; from or to is empty when
// the input was added or removed.
type inputChange struct {
	name, from, to string
	added, removed bool
}

// changedInputs lists the inputs that differ from one entry's to the next's, by name; an entry
// recorded before inputs were (nil) compares as unknown: no change is claimed.
func changedInputs(from, to []kclv1.InputValue) []inputChange {
	if from == nil || to == nil {
		return nil
	}
	old := map[string]string{}
	for _, v := range from {
		old[v.Name] = v.Value
	}
	var out []inputChange
	for _, v := range to {
		prev, ok := old[v.Name]
		switch {
		case !ok:
			out = append(out, inputChange{name: v.Name, to: v.Value, added: true})
		case prev != v.Value:
			out = append(out, inputChange{name: v.Name, from: prev, to: v.Value})
		}
		delete(old, v.Name)
	}
	for name, prev := range old {
		out = append(out, inputChange{name: name, from: prev, removed: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// String is "web.tag 1.4.2 → 1.4.3", each value cut and escaped to one line.
func (c inputChange) String() string {
	short := func(s string) string { return termsafe.Line(cutText(s, 64)) }
	switch {
	case c.added:
		return c.name + " = " + short(c.to) + " (new)"
	case c.removed:
		return c.name + " removed"
	case c.from == maskedInput && c.to == maskedInput:
		return c.name + " changed"
	}
	return c.name + " " + short(c.from) + " → " + short(c.to)
}

// inputChangeText joins at most n changes, counting the rest.
func inputChangeText(changes []inputChange, n int) string {
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

// cutText shortens s to at most n bytes, on a rune boundary, marking the cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n-len("…")]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}
