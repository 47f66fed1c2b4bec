package nodeinstall

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The controller installed on the node, where Flux has no notification-controller, posts its
// events nowhere (as Flux's own controllers there), unless told to keep the address; the overlay
// is built by kubectl's kustomize as `kubectl apply -k` builds it.
func TestControllerOverlayEmptiesTheEventsAddress(t *testing.T) {
	root, kubectl := testKubectl(t)
	arg := regexp.MustCompile(`--events-addr=\S*`)
	for _, tc := range []struct {
		keep bool
		want string
	}{
		{false, "--events-addr="},
		{true, "--events-addr=http://notification-controller.flux-system.svc.cluster.local./"},
	} {
		for _, base := range []string{"config/default", "config/persistent-storage"} {
			i := &Installer{Kubectl: kubectl, RepoRoot: root, WorkDir: t.TempDir(), KeepEventsAddr: tc.keep,
				Logf: t.Logf}
			dir := filepath.Join(i.WorkDir, "overlay")
			if err := i.writeControllerOverlay(dir, filepath.Join(root, "config"), base, "example.test/controller:v1"); err != nil {
				t.Fatal(err)
			}
			out, err := i.kubectl(context.Background(), nil, "kustomize", dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := arg.FindAllString(out, -1); len(got) != 1 || got[0] != tc.want {
				t.Errorf("%s, KeepEventsAddr %v: %q, want [%s]", base, tc.keep, got, tc.want)
			}
		}
	}
}

type fakeGit struct{}

func (fakeGit) CreateRepo(string, string) (string, error) { return "", nil }
func (fakeGit) Commit(string, string, func(string) error) (string, error) {
	return "", nil
}
func (fakeGit) URL(name string) string { return "http://git.example.test/" + name }

// The platform repository builds with kustomize as Flux builds it: flux-system syncs itself from
// the repository, infrastructure.yaml installs this controller from its directory, and that
// directory is config/default with the image override. (No Git server: only the layout is
// checked here; the node suite pushes it to a real one and Flux applies it.)
func TestPlatformRepositoryBuilds(t *testing.T) {
	root, kubectl := testKubectl(t)
	i := &Installer{Kubectl: kubectl, RepoRoot: root, WorkDir: t.TempDir(), Logf: t.Logf, Lockdown: true}
	i.fluxSystem = filepath.Join(i.WorkDir, "flux-system")
	if err := i.writeBootstrapRepo(i.fluxSystem, "# Flux's components\n"); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(i.WorkDir, "platform")
	p := &Platform{Git: fakeGit{}, Repo: "platform"}
	if err := i.writePlatform(dir, p, filepath.Join(root, "config"), "config/default", "example.test/controller:v1"); err != nil {
		t.Fatal(err)
	}
	infra, err := os.ReadFile(filepath.Join(dir, platformCluster, "infrastructure.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// kustomize-controller builds clusters/node without a kustomization.yaml of its own, from its
	// files and directories: flux-system's kustomization and infrastructure.yaml
	for sub, want := range map[string][]string{
		platformCluster + "/flux-system": {"kind: GitRepository", "url: http://git.example.test/platform", "path: ./clusters/node", "kind: Kustomization",
			// locked down: the platform's own Kustomization keeps kustomize-controller's rights
			"serviceAccountName: kustomize-controller"},
		platformControllerDir: {"image: example.test/controller:v1", "kind: CustomResourceDefinition", "--events-addr=\n", "--no-cross-namespace-refs=true"},
	} {
		out, err := i.kubectl(context.Background(), nil, "kustomize", filepath.Join(dir, sub))
		if err != nil {
			t.Fatal(err)
		}
		if sub != platformControllerDir {
			out += string(infra)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("kustomize build %s has no %q", sub, w)
			}
		}
	}
	policies, err := i.kubectl(context.Background(), nil, "kustomize", filepath.Join(dir, platformCluster, "kcl-flux-system"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(policies, "kind: NetworkPolicy"); n != 2 || !strings.Contains(policies, "namespace: flux-system") {
		t.Errorf("kcl-flux-system builds %d NetworkPolicies, want config/flux-system's 2 in flux-system:\n%s", n, policies)
	}
	for _, w := range []string{"path: ./infrastructure/kcl-artifact-controller", "serviceAccountName: kustomize-controller", "wait: true"} {
		if !strings.Contains(string(infra), w) {
			t.Errorf("infrastructure.yaml has no %q", w)
		}
	}
}

// testKubectl is the repository's root and the kubectl `make nodebin` built (the test is skipped
// without it): kubectl's kustomize builds what `kubectl apply -k` and kustomize-controller build.
func testKubectl(t *testing.T) (root, kubectl string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	kubectl = filepath.Join(root, "bin", "node", "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Skipf("no %s (make nodebin)", kubectl)
	}
	return root, kubectl
}
