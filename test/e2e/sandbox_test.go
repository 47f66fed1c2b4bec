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

// spyProgram publishes, as a ConfigMap in its own namespace, whatever of the controller's
// machine it can list: the staging root (every namespace's directory), the artifact storage and
// the controller's state directory with its kubeconfig.
func spyProgram(ns string, dirs ...string) string {
	var globs []string
	for _, d := range dirs {
		globs = append(globs, fmt.Sprintf("file.glob(%q)", d+"/**"))
	}
	return fmt.Sprintf(`import file
_found = [p for g in [%s] for p in g]
[{apiVersion = "v1", kind = "ConfigMap", metadata = {name = "spy", namespace = %q}, data.found = str(_found)}]
`, strings.Join(globs, ", "), ns)
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
	kubeconfigs, _ := filepath.Glob(filepath.Join(state, "*kubeconfig*"))
	if _, err := os.Stat(filepath.Join(state, "staging", nsA)); err != nil {
		t.Fatalf("tenant A's staging root should exist on the controller's machine: %v", err)
	}
	read := `import file
_token = file.read(%q)
[{apiVersion = "v1", kind = "ConfigMap", metadata = {name = "token", namespace = %q}, data.t = _token}]
`
	files := map[string]string{"spy/main.k": spyProgram(nsB, filepath.Join(state, "staging"), kclController().StorageDir, state)}
	if len(kubeconfigs) > 0 {
		files["token/main.k"] = fmt.Sprintf(read, kubeconfigs[0], nsB)
	}
	revB := gitRevision(createRepo(t, nsB, files))
	createGitRepository(t, nsB, "app", nsB)
	spy := newKCLArtifact(nsB, "spy", "app", nil)
	spy.Spec.Path = "spy"
	create(t, spy)
	waitKCLArtifactReady(t, nsB, "spy", revB)
	var cm corev1.ConfigMap
	waitFor(t, nsB, "the spy ConfigMap applied", func(ctx context.Context) (bool, string, error) {
		err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "spy"}, &cm)
		return err == nil, fmt.Sprint(err), client.IgnoreNotFound(err)
	})
	if found := cm.Data["found"]; found != "[]" {
		t.Fatalf("tenant B listed files of the controller's machine: %s", found)
	}

	if len(kubeconfigs) > 0 {
		tok := newKCLArtifact(nsB, "token", "app", nil)
		tok.Spec.Path = "token"
		create(t, tok)
		waitFor(t, nsB, "the token read refused", func(ctx context.Context) (bool, string, error) {
			var obj kclv1.KCLArtifact
			if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "token"}, &obj); err != nil {
				return false, "", client.IgnoreNotFound(err)
			}
			msg := conditions.GetMessage(&obj, meta.ReadyCondition)
			return conditions.GetReason(&obj, meta.ReadyCondition) == kclv1.RenderFailedReason &&
				strings.Contains(msg, "Permission denied"), kclArtifactState(&obj), nil
		})
	}
	// A is untouched: same artifact, still Ready
	if got := waitKCLArtifactReady(t, nsA, "app", revA); got.Status.Artifact.Digest != objA.Status.Artifact.Digest {
		t.Fatalf("tenant A's artifact changed: %s -> %s", objA.Status.Artifact.Digest, got.Status.Artifact.Digest)
	}
}
