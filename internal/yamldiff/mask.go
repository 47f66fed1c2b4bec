package yamldiff

import (
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Masked values of Secrets, as they appear in diffs and views.
const (
	MaskedValue  = "***"
	MaskedChange = "*** (changed)"
)

// secretFields hold a Secret's values.
var secretFields = []string{"data", "stringData"}

// IsSecret tells whether o is a core Secret.
func IsSecret(o *unstructured.Unstructured) bool {
	return o != nil && o.GetKind() == "Secret" && o.GroupVersionKind().Group == ""
}

// Mask returns o with every Secret value replaced by MaskedValue; o itself is not changed.
// Anything that is not a Secret is returned as it is.
func Mask(o *unstructured.Unstructured) *unstructured.Unstructured {
	m, _ := maskPair(o, nil)
	return m
}

// maskPair masks two versions of one object. A value that differs between them, or exists on
// one side only, shows as MaskedChange on the newer side, so that a reviewer sees which key
// changed without seeing its value.
func maskPair(from, to *unstructured.Unstructured) (*unstructured.Unstructured, *unstructured.Unstructured) {
	if !IsSecret(from) && !IsSecret(to) {
		return from, to
	}
	mf, mt := copyOf(from), copyOf(to)
	for _, field := range secretFields {
		a, b := values(from, field), values(to, field)
		if mf != nil && a != nil {
			setMasked(mf, field, a, nil)
		}
		if mt != nil && b != nil {
			setMasked(mt, field, b, a)
		}
	}
	return mf, mt
}

func copyOf(o *unstructured.Unstructured) *unstructured.Unstructured {
	if o == nil {
		return nil
	}
	return o.DeepCopy()
}

func values(o *unstructured.Unstructured, field string) map[string]any {
	if o == nil {
		return nil
	}
	m, _ := o.Object[field].(map[string]any)
	return m
}

// setMasked replaces field of o by the keys of vals, masked; a key whose value differs from
// before (when before is given) is marked as changed.
func setMasked(o *unstructured.Unstructured, field string, vals, before map[string]any) {
	masked := make(map[string]any, len(vals))
	for k, v := range vals {
		masked[k] = MaskedValue
		if before != nil {
			if old, ok := before[k]; !ok || !reflect.DeepEqual(old, v) {
				masked[k] = MaskedChange
			}
		}
	}
	o.Object[field] = masked
}
