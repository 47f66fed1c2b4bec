package fluxkcl

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
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
		out, err = yaml.Marshal(v)
	}
	if err != nil {
		return err
	}
	_, err = a.stdout.Write(out)
	return err
}
