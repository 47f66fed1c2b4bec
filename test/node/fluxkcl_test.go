package node

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// fluxKCLThroughThePod runs `flux kcl diff` and `flux kcl ui` through the real flux CLI against
// the node: both reach the controller's leader Pod by a port-forward through the API server and
// kubelet, which test/e2e (a controller outside any cluster) cannot show. ns's KCLArtifact app
// has rendered v1 and v2.
func fluxKCLThroughThePod(t *testing.T, ns string) {
	bin, plugins := fluxAndPlugin(t)
	pod, err := controllerPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := fluxenv.RunFlux(t, bin, plugins, suite.node.KubeconfigPath, "\x00", "kcl", "diff", "app", "-n", ns)
	if r.Code != 0 || r.Stderr != "► port-forwarding to the artifact server of Pod "+controllerNS+"/"+pod.Name+"\n" ||
		!strings.Contains(r.Stdout, "# 0 added, 0 removed, 1 changed") || !strings.Contains(r.Stdout, "v1") || !strings.Contains(r.Stdout, "v2") {
		t.Errorf("flux kcl diff: exit %d, stderr %q; want the change from v1 to v2 through Pod %s", r.Code, r.Stderr, pod.Name)
	}

	url := startUI(t, bin, plugins, ns)
	page := getLocal(t, url)
	if !strings.Contains(page, "<html") || !strings.Contains(page, ns) {
		t.Errorf("GET %s through the port-forward: want the page of KCLArtifact %s/app, got %.200q", url, ns, page)
	}
	// the view listens on the Pod's loopback only: the Pod's address does not answer on its port,
	// the artifact server's port does
	ctx := context.Background()
	if res, _ := get(ctx, "http://"+net.JoinHostPort(pod.Status.PodIP, "9091")+"/"); res.Error == "" {
		t.Errorf("the browser view answered at the Pod IP (HTTP %d): it must listen on the Pod's loopback only", res.Status)
	}
	if res, _ := get(ctx, "http://"+net.JoinHostPort(pod.Status.PodIP, "9090")+"/"); res.Error != "" {
		t.Errorf("the artifact server at the Pod IP, which shows the Pod is reachable: %s", res.Error)
	}
}

// fluxAndPlugin is the flux CLI `make fluxcli` built and a $FLUXCD_PLUGINS holding flux-kcl.
func fluxAndPlugin(t *testing.T) (string, string) {
	bin := filepath.Join(suite.repo, "bin", "flux-cli", "flux")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing (make fluxcli): %v", bin, err)
	}
	plugins := t.TempDir()
	if err := fluxenv.BuildPlugin(suite.repo, plugins, ""); err != nil {
		t.Fatal(err)
	}
	return bin, plugins
}

// startUI runs `flux kcl ui app` until the test ends and returns the URL it prints. On cleanup it
// interrupts it, as Ctrl+C does, and expects exit 0.
func startUI(t *testing.T, bin, plugins, ns string) string {
	p := fluxenv.StartFlux(t, bin, plugins, suite.node.KubeconfigPath, "kcl", "ui", "app", "-n", ns, "--port", "0")
	t.Cleanup(func() {
		if err := p.Interrupt(t); err != nil {
			t.Errorf("flux kcl ui after Ctrl+C: %v", err)
		}
	})
	url := p.Next(t, "the URL", waitTimeout)
	t.Logf("flux kcl ui app -n %s --port 0: stdout %s", ns, url)
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/kclartifact/"+ns+"/app/") {
		t.Fatalf("flux kcl ui printed %q", url)
	}
	return url
}

// getLocal GETs url from this machine (not the node's network namespace).
func getLocal(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", url, resp.Status, err)
	}
	return string(body)
}
