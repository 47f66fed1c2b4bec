package nodeinstall

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The controller installed on the node, where Flux has no notification-controller, posts its
// events nowhere (as Flux's own controllers there), unless told to keep the address; the overlay
// is built by kubectl's kustomize as `kubectl apply -k` builds it.
func TestControllerOverlayEmptiesTheEventsAddress(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(root, "bin", "node", "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Skipf("no %s (make nodebin)", kubectl)
	}
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
