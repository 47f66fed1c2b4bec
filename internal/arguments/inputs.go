package arguments

import (
	"sort"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputchange"
)

// Masked stands for a value read from a Secret wherever inputs are shown.
const Masked = inputchange.Masked

const (
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
		out = append(out, kclv1.InputValue{Name: name, Value: inputchange.Cut(v, maxInputValue), From: a.from})
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
