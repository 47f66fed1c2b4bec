package arguments

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

const (
	// Masked stands for a value read from a Secret wherever inputs are shown.
	Masked = "***"
	// maxInputs and maxInputValue bound what a history entry records of its inputs, so that
	// status stays small whatever a ConfigMap holds.
	maxInputs     = 32
	maxInputValue = 256
)

// inputs lists the arguments for the history: those read from objects first (what automation
// changes), then spec.arguments, at most maxInputs, Secret values masked, values cut.
func inputs(values map[string]argument) []kclv1.InputValue {
	out := make([]kclv1.InputValue, 0, len(values))
	for name, a := range values {
		v := a.text
		if a.secret {
			v = Masked
		}
		out = append(out, kclv1.InputValue{Name: name, Value: cut(v, maxInputValue), From: a.from})
	}
	sort.Slice(out, func(i, j int) bool {
		if (out[i].From == "") != (out[j].From == "") {
			return out[j].From == ""
		}
		return out[i].Name < out[j].Name
	})
	if len(out) > maxInputs {
		out = out[:maxInputs]
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// cut shortens s to at most n bytes, on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n-len("…")]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// quote is s as a KCL argument that stays a string: a JSON string literal.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

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

// String is "web.tag 1.4.2 → 1.4.3" (a masked value stays masked: "db.password changed").
func (c Change) String() string {
	short := func(s string) string { return termsafe.Line(cut(s, 64)) }
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

// ChangeText joins at most n changes, "…" for the rest.
func ChangeText(changes []Change, n int) string {
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
