package nodeinstall

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// The lockdown patches, added to the README's bootstrap kustomization, give kustomize-controller
// both flags next to the ExternalArtifact gate, as kubectl's kustomize builds them; the controller's
// overlay gets --no-cross-namespace-refs=true once.
func TestLockdownPatchesBuild(t *testing.T) {
	root, kubectl := testKubectl(t)
	i := &Installer{Kubectl: kubectl, RepoRoot: root, WorkDir: t.TempDir(), Lockdown: true, Logf: t.Logf}
	dir := filepath.Join(t.TempDir(), "flux-system")
	deployment := `apiVersion: apps/v1
kind: Deployment
metadata:
  name: kustomize-controller
spec:
  template:
    spec:
      containers:
        - name: manager
          args: [--watch-all-namespaces=true]
`
	if err := i.writeBootstrapRepo(dir, deployment); err != nil {
		t.Fatal(err)
	}
	out, err := i.kubectl(context.Background(), nil, "kustomize", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"--feature-gates=ExternalArtifact=true", "--no-cross-namespace-refs=true", "--default-service-account=default"} {
		if strings.Count(out, "- "+arg+"\n") != 1 {
			t.Errorf("kustomize-controller's args lack %s once:\n%s", arg, out)
		}
	}

	overlay := filepath.Join(i.WorkDir, "overlay")
	if err := i.writeControllerOverlay(overlay, filepath.Join(root, "config"), "config/default", "example.test/controller:v1"); err != nil {
		t.Fatal(err)
	}
	out, err = i.kubectl(context.Background(), nil, "kustomize", overlay)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out, "- --no-cross-namespace-refs=true\n"); n != 1 {
		t.Errorf("the controller's Deployment has --no-cross-namespace-refs=true %d times, want 1", n)
	}
}

func TestLockDownBootstrapKustomizationNeedsPatches(t *testing.T) {
	if _, err := LockDownBootstrapKustomization("resources:\n  - a.yaml\n"); err == nil {
		t.Fatal("a kustomization without patches: was accepted")
	}
}
