package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// program is the KCL program every KCLArtifact of the harness renders: per KCLArtifact, a
// ConfigMap and a Deployment named after option("name"), in option("namespace"), with
// option("replicas") replicas. version is a data field of the ConfigMap and an environment
// variable of the Deployment, so each commit (a new version) changes every output, and distinct
// arguments make each KCLArtifact's output distinct.
func program(version string) string { return programWith(version, nil) }

// programWith is program where the applications named in versions have their own version: a
// commit that changes some applications of a shared program, and renders the others as before.
func programWith(version string, versions map[string]string) string {
	var table []string
	for _, name := range slices.Sorted(maps.Keys(versions)) {
		table = append(table, fmt.Sprintf("%q: %q", name, versions[name]))
	}
	return fmt.Sprintf(`_name = option("name", type="str", required=True)
_ns = option("namespace", type="str", required=True)
_replicas = option("replicas", type="int", default=1)
_versions = {%s}
_version = _versions[_name] if _name in _versions else %q
%s
items = %s
`, strings.Join(table, ", "), version, appLabels, appObjects)
}

// groupApp is one application of a grouped program.
type groupApp struct {
	name, version string
	replicas      int
}

// groupProgram renders the objects of program for every application of apps, in
// option("namespace"): the program of a KCLArtifact that stands for a whole namespace. The
// application's objects are program's, word for word, in a lambda.
func groupProgram(apps []groupApp) string {
	var list strings.Builder
	for _, a := range apps {
		fmt.Fprintf(&list, "    {name = %q, replicas = %d, version = %q}\n", a.name, a.replicas, a.version)
	}
	indent := func(s string) string { return strings.ReplaceAll(s, "\n", "\n    ") }
	return fmt.Sprintf(`_ns = option("namespace", type="str", required=True)
_apps = [
%s]

_app = lambda _name: str, _replicas: int, _version: str -> [] {
    %s
    %s
}

items = [o for a in _apps for o in _app(a.name, a.replicas, a.version)]
`, list.String(), indent(strings.TrimSpace(appLabels)), indent(appObjects))
}

// appLabels and appObjects are one application's objects, from _name, _ns, _replicas and _version.
const appLabels = `_labels = {
    "app.kubernetes.io/name" = _name
    "app.kubernetes.io/part-of" = "bench-scale"
}
`

const appObjects = `[
    {
        apiVersion = "v1"
        kind = "ConfigMap"
        metadata = {name = "${_name}-config", namespace = _ns, labels = _labels}
        data = {name = _name, replicas = str(_replicas), version = _version}
    }
    {
        apiVersion = "apps/v1"
        kind = "Deployment"
        metadata = {name = _name, namespace = _ns, labels = _labels}
        spec = {
            replicas = _replicas
            selector.matchLabels = {"app.kubernetes.io/name" = _name}
            template = {
                metadata.labels = {"app.kubernetes.io/name" = _name}
                spec.containers = [{
                    name = "app"
                    image = "nginx:1.27"
                    env = [{name = "VERSION", value = _version}]
                }]
            }
        }
    }
]`
