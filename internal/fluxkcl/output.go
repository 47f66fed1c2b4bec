package fluxkcl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v2"
)

// checkOutput validates -o of the verbs that have it; "" or table is their default, as in flux.
func checkOutput(output string, formats ...string) error {
	if slices.Contains(formats, output) {
		return nil
	}
	named := slices.DeleteFunc(slices.Clone(formats), func(f string) bool { return f == "" })
	list := named[len(named)-1]
	if len(named) > 1 {
		list = strings.Join(named[:len(named)-1], ", ") + " or " + list
	}
	return fmt.Errorf("--output must be %s, not %s", list, output)
}

// printData prints v as JSON (indented) or YAML on stdout.
func (a *app) printData(output string, v any) error {
	var out []byte
	var err error
	if output == "json" {
		out, err = json.MarshalIndent(v, "", "  ")
		out = append(out, '\n')
	} else {
		out, err = yamlOf(v)
	}
	if err != nil {
		return err
	}
	_, err = a.stdout.Write(out)
	return err
}

// yamlOf is v as sigs.k8s.io/yaml writes it (through its JSON: field names, keys sorted), every
// string kept exactly. sigs.k8s.io/yaml reads that JSON back with a YAML parser, which refuses a
// C1 control in a string that a tenant wrote, and the output would fail.
func yamlOf(v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var obj any
	if err := dec.Decode(&obj); err != nil {
		return nil, err
	}
	return yaml.Marshal(withNumbers(obj))
}

// withNumbers turns JSON numbers into integers where they are, floats otherwise.
func withNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = withNumbers(x)
		}
	case []any:
		for i, x := range t {
			t[i] = withNumbers(x)
		}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	}
	return v
}
