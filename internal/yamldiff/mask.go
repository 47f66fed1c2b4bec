package yamldiff

import (
	"encoding/base64"
	"fmt"
	"reflect"
	"sort"
	"strings"

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

// minSensitive is the shortest value masked wherever it appears: a shorter one is no secret
// worth hiding, and masking it would hide every occurrence of common text.
const minSensitive = 4

// sensitiveForms are the values to mask, as given and as base64 (a program that encodes a value
// does not show it so), longest first so that one containing another is masked whole.
func sensitiveForms(values []string) []string {
	var out []string
	for _, v := range values {
		if len(v) < minSensitive {
			continue
		}
		out = append(out, v, base64.StdEncoding.EncodeToString([]byte(v)), base64.RawStdEncoding.EncodeToString([]byte(v)))
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// MaskValues returns o with every occurrence of values (those of Secrets, see
// Options.Sensitive) replaced by MaskedValue, in any string, key or scalar; o is not changed.
func MaskValues(o *unstructured.Unstructured, values []string) *unstructured.Unstructured {
	return maskValues(o, sensitiveForms(values))
}

// maskValues is MaskValues for values already expanded by sensitiveForms.
func maskValues(o *unstructured.Unstructured, sensitive []string) *unstructured.Unstructured {
	if o == nil || len(sensitive) == 0 {
		return o
	}
	// maskAny builds new maps and slices: o is left as it is without a copy first
	return &unstructured.Unstructured{Object: maskAny(o.Object, sensitive).(map[string]any)}
}

func maskAny(v any, sensitive []string) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, x := range t {
			out[maskString(k, sensitive)] = maskAny(x, sensitive)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = maskAny(x, sensitive)
		}
		return out
	case string:
		return maskString(t, sensitive)
	case nil, bool:
		return t
	default: // numbers: a value typed as one by KCL
		if s := fmt.Sprint(t); maskString(s, sensitive) != s {
			return MaskedValue
		}
		return t
	}
}

func maskString(s string, sensitive []string) string {
	for _, v := range sensitive {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, MaskedValue)
		}
	}
	return s
}
