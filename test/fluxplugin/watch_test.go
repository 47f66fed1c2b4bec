package fluxplugin

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// testGetWatch: get --watch prints podinfo's row again when the row changes (suspended, then
// resumed) and not for a change the row does not show (a label); Ctrl+C ends it with exit 0.
func testGetWatch(t *testing.T, c client.Client, kc string) {
	cmd := exec.Command(fluxBinary(t), "kcl", "get", "podinfo", "-n", "apps", "--watch")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "FLUXCD_PLUGINS=" + pluginDir, "KUBECONFIG=" + kc}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("get --watch ended before %s; stderr %q", what, stderr.String())
			}
			return l
		case <-time.After(time.Minute):
			t.Fatalf("get --watch printed no %s within a minute", what)
		}
		return ""
	}
	if h, row := next("header"), next("row"); !strings.HasPrefix(h, "NAME") || !strings.HasPrefix(row, "podinfo") {
		t.Fatalf("get --watch listed %q, %q", h, row)
	}
	patch(t, c, `{"metadata":{"labels":{"seen":"yes"}}}`)
	patch(t, c, `{"spec":{"suspend":true}}`)
	if row := strings.Fields(next("row after suspend")); row[0] != "podinfo" || row[2] != "True" {
		t.Errorf("after a label and then suspend, the first row printed is %q; want podinfo suspended (a label changes no row)", row)
	}
	patch(t, c, `{"spec":{"suspend":false}}`)
	if row := strings.Fields(next("row after resume")); row[2] != "False" {
		t.Errorf("after resume: %q", row)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("get --watch after Ctrl+C: %v, stderr %q", err, stderr.String())
	}
}

func patch(t *testing.T, c client.Client, p string) {
	t.Helper()
	obj := &kclv1.KCLArtifact{}
	obj.Namespace, obj.Name = "apps", "podinfo"
	if err := c.Patch(context.Background(), obj, client.RawPatch("application/merge-patch+json", []byte(p))); err != nil {
		t.Fatal(err)
	}
}
