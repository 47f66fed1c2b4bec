package fluxkcl

import (
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// checkOutput validates -o of the verbs that have it; table is their default, as in flux.
func checkOutput(output string, formats ...string) error {
	for _, f := range formats {
		if output == f {
			return nil
		}
	}
	return fmt.Errorf("--output must be one of %v, not %s", formats, output)
}

// printData prints v as JSON (indented) or YAML on stdout.
func (a *app) printData(output string, v any) error {
	var out []byte
	var err error
	if output == "json" {
		out, err = json.MarshalIndent(v, "", "  ")
		out = append(out, '\n')
	} else {
		out, err = yaml.Marshal(v)
	}
	if err != nil {
		return err
	}
	_, err = a.stdout.Write(out)
	return err
}
