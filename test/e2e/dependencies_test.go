package e2e

import (
	"context"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

// TestOCIDependency: a program importing a k8s-style schema package from an OCI registry on
// 127.0.0.1 (pushed as kcl's package manager pushes) is rendered, published and applied.
func TestOCIDependency(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "deps")
	reg := kclmodtest.StartRegistry(t, "", "")
	lib := kclmodtest.WritePackage(t, t.TempDir(), "k8s", "1.31.2", nil, map[string]string{
		"api/core/v1/config_map.k": `schema ConfigMap:
    apiVersion: "v1" = "v1"
    kind: "ConfigMap" = "ConfigMap"
    metadata: {str:any}
    data?: {str:str}
`,
	})
	if _, err := reg.PushPackage(context.Background(), reg.Host+"/kcl-lang/k8s:1.31.2", lib, kclmodtest.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	rev := gitRevision(createRepo(t, ns, map[string]string{
		"kcl.mod": "[package]\nname = \"app\"\nedition = \"v0.11.0\"\nversion = \"0.1.0\"\n\n[dependencies]\n" +
			`k8s = { oci = "oci://` + reg.Host + `/kcl-lang/k8s", tag = "1.31.2" }` + "\n",
		"main.k": "import k8s.api.core.v1 as core\n\n[core.ConfigMap {\n    metadata.name = \"typed\"\n    metadata.namespace = option(\"namespace\")\n    data = {schema = \"k8s\"}\n}]\n",
	}))
	createGitRepository(t, ns, "app", ns)
	ka := newKCLArtifact(ns, "app", "app", nil)
	create(t, ka)
	obj := waitKCLArtifactReady(t, ns, "app", rev)
	waitKustomizationApplied(t, ns, "app", obj.Status.Artifact.Revision)
	waitConfigMap(t, ns, "typed", map[string]string{"schema": "k8s"})
}
