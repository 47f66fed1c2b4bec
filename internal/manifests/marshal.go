package manifests

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"unicode"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// marshal writes a decoded object as YAML, byte for byte as sigs.k8s.io/yaml.Marshal does
// wherever that is deterministic (the artifact's digest, hence whether a render publishes,
// depends on it), at a third of its cost. yaml.Marshal goes through JSON text, which go-yaml
// then parses back: what comes out of that round trip is the object itself except for numbers,
// which come back as the type their JSON text reads as. marshal converts the numbers and hands
// the object to go-yaml directly, with each mapping's keys already in go-yaml's order. go-yaml's
// order is not a total one for some keys ("17220202", "1A0", "7Y"), and sorting a Go map's keys,
// which come in random order, gave such mappings a different output from one run to the next: a
// stable sort from a fixed order gives them one. A value a JSON decoder cannot have produced
// takes the round trip instead.
func marshal(obj map[string]any) ([]byte, error) {
	v, err := yamlValue(obj)
	if err != nil {
		return yaml.Marshal(obj)
	}
	return yamlv2.Marshal(v)
}

// yamlValue is v as go-yaml gets it from sigs.k8s.io/yaml: mappings as ordered slices, numbers
// as yamlNumber reads them.
func yamlValue(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		return yamlMapping(t)
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			var err error
			if out[i], err = yamlValue(e); err != nil {
				return nil, err
			}
		}
		return out, nil
	case float64:
		return yamlNumber(t), nil
	case string, bool, nil:
		return t, nil
	}
	return nil, fmt.Errorf("%T is not a decoded JSON value", v)
}

func yamlMapping(m map[string]any) (yamlv2.MapSlice, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	sort.SliceStable(keys, func(i, j int) bool { return yamlKeyLess(keys[i], keys[j]) })
	out := make(yamlv2.MapSlice, len(keys))
	for i, k := range keys {
		v, err := yamlValue(m[k])
		if err != nil {
			return nil, err
		}
		out[i] = yamlv2.MapItem{Key: k, Value: v}
	}
	return out, nil
}

// yamlKeyLess is go-yaml v2's order of string keys: letters by code point and before anything
// else, and runs of digits by their value (a run after non-zero digits keeps its leading zeros
// significant), the int64 arithmetic, overflow and non-ASCII digits included.
func yamlKeyLess(a, b string) bool {
	ar, br := []rune(a), []rune(b)
	for i := 0; i < len(ar) && i < len(br); i++ {
		if ar[i] == br[i] {
			continue
		}
		al, bl := unicode.IsLetter(ar[i]), unicode.IsLetter(br[i])
		if al && bl {
			return ar[i] < br[i]
		}
		if al || bl {
			return bl
		}
		var an, bn int64
		if ar[i] == '0' || br[i] == '0' {
			for j := i - 1; j >= 0 && unicode.IsDigit(ar[j]); j-- {
				if ar[j] != '0' {
					an, bn = 1, 1
					break
				}
			}
		}
		ai, an := digitRun(ar, i, an)
		bi, bn := digitRun(br, i, bn)
		if an != bn {
			return an < bn
		}
		if ai != bi {
			return ai < bi
		}
		return ar[i] < br[i]
	}
	return len(ar) < len(br)
}

// digitRun reads the digits of r from i on into n, returning where they end and n.
func digitRun(r []rune, i int, n int64) (int, int64) {
	for ; i < len(r) && unicode.IsDigit(r[i]); i++ {
		n = n*10 + int64(r[i]-'0')
	}
	return i, n
}

// yamlNumber is f as go-yaml resolves encoding/json's text for it: encoding/json writes
// exponents only outside [1e-6, 1e21), and go-yaml reads digits without a point or an exponent
// as an int when they fit an int64, then a uint64, and as a float otherwise.
func yamlNumber(f float64) any {
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		return f
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return int(i)
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return u
	}
	return f
}
