package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// spyProgram publishes, as a ConfigMap in its own namespace, what it can list under dir.
func spyProgram(ns, dir string) string {
	return fmt.Sprintf(`import file
[{apiVersion = "v1", kind = "ConfigMap", metadata = {name = "spy", namespace = %q}, data.found = str(file.glob(%q))}]
`, ns, dir+"/**")
}

// tokenProgram publishes the content of a file of the controller's.
func tokenProgram(ns, path string) string {
	return fmt.Sprintf(`import file
[{apiVersion = "v1", kind = "ConfigMap", metadata = {name = "token", namespace = %q}, data.t = file.read(%q)}]
`, ns, path)
}

// TestTenantsAreConfined (two namespaces, the real controller process): tenant B's programs
// cannot see tenant A's staged sources, the storage, or the controller's credentials, and A's
// renders are unaffected.
func TestTenantsAreConfined(t *testing.T) {
	t.Parallel()
	nsA, nsB := newNamespace(t, "tenant-a"), newNamespace(t, "tenant-b")
	revA := gitRevision(createRepo(t, nsA, program{version: "1"}.files()))
	createGitRepository(t, nsA, "app", nsA)
	create(t, newKCLArtifact(nsA, "app", "app", map[string]string{"name": "app", "env": "a"}))
	objA := waitKCLArtifactReady(t, nsA, "app", revA)

	state := filepath.Join(suite.env.WorkDir, controllerName)
	if _, err := os.Stat(filepath.Join(state, "staging", nsA)); err != nil {
		t.Fatalf("tenant A's staging root should exist on the controller's machine: %v", err)
	}
	// the staging root (tenant A's directory is there), the artifact storage, the controller's
	// state directory, and its kubeconfig: each refused
	files := map[string]string{
		"staging/main.k": spyProgram(nsB, filepath.Join(state, "staging")),
		"storage/main.k": spyProgram(nsB, kclController().StorageDir),
		"state/main.k":   spyProgram(nsB, state),
	}
	kubeconfigs, _ := filepath.Glob(filepath.Join(state, "*kubeconfig*"))
	if len(kubeconfigs) == 0 {
		kubeconfigs = []string{suite.env.KubeconfigPath}
	}
	files["token/main.k"] = tokenProgram(nsB, kubeconfigs[0])
	createRepo(t, nsB, files)
	createGitRepository(t, nsB, "app", nsB)
	for path := range files {
		name := filepath.Dir(path)
		spy := newKCLArtifact(nsB, name, "app", nil)
		spy.Spec.Path = name
		create(t, spy)
	}
	for path := range files {
		name := filepath.Dir(path)
		waitFor(t, nsB, "tenant B's "+name+" program refused", func(ctx context.Context) (bool, string, error) {
			var obj kclv1.KCLArtifact
			if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: nsB, Name: name}, &obj); err != nil {
				return false, "", client.IgnoreNotFound(err)
			}
			msg := conditions.GetMessage(&obj, meta.ReadyCondition)
			return conditions.GetReason(&obj, meta.ReadyCondition) == kclv1.RenderFailedReason &&
				strings.Contains(msg, "Permission denied"), kclArtifactState(&obj), nil
		})
	}
	var cms corev1.ConfigMapList
	if err := suite.env.Client.List(t.Context(), &cms, client.InNamespace(nsB)); err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		if cm.Name == "spy" || cm.Name == "token" {
			t.Fatalf("tenant B published what it read: %v", cm.Data)
		}
	}
	// the kubeconfig's credentials appear nowhere in the controller's log
	kc, err := os.ReadFile(kubeconfigs[0])
	if err != nil {
		t.Fatal(err)
	}
	secret := longestLine(string(kc))
	if lines := grepLines(filepath.Join(suite.env.LogDir, controllerName+".log"), secret); len(lines) > 0 {
		t.Fatalf("the controller logged its kubeconfig's credentials")
	}
	// A is untouched: same artifact, still Ready
	if got := waitKCLArtifactReady(t, nsA, "app", revA); got.Status.Artifact.Digest != objA.Status.Artifact.Digest {
		t.Fatalf("tenant A's artifact changed: %s -> %s", objA.Status.Artifact.Digest, got.Status.Artifact.Digest)
	}
}

func longestLine(s string) string {
	var best string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); len(l) > len(best) {
			best = l
		}
	}
	return best
}
