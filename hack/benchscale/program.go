package main

import "fmt"

// program is the KCL program every KCLArtifact of the harness renders: per KCLArtifact, a
// ConfigMap and a Deployment named after option("name"), in option("namespace"), with
// option("replicas") replicas. version is a data field of the ConfigMap and an environment
// variable of the Deployment, so each commit (a new version) changes every output, and distinct
// arguments make each KCLArtifact's output distinct.
func program(version string) string {
	return fmt.Sprintf(`_name = option("name", type="str", required=True)
_ns = option("namespace", type="str", required=True)
_replicas = option("replicas", type="int", default=1)
_version = %q
_labels = {
    "app.kubernetes.io/name" = _name
    "app.kubernetes.io/part-of" = "bench-scale"
}

items = [
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
]
`, version)
}
