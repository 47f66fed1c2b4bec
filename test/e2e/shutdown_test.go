package e2e

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// slowProgram takes seconds of CPU (four million steps, 5 s on an idle core here), in little
// memory: long enough to be caught mid-render, short enough that three renders at once on a
// loaded two-core machine finish within a wait.
const slowProgram = `_ns = option("namespace", type="str", required=True)
_name = option("name", type="str", default="app")
_n = sum([sum([j % 7 for j in range(20000)]) for k in range(200)])
items = [{apiVersion = "v1", kind = "ConfigMap", metadata = {name = "${_name}-slow", namespace = _ns}, data.n = str(_n)}]
`

// terminationGracePeriod is the Pod's default, which config/manager keeps.
const terminationGracePeriod = 30 * time.Second

// TestGracefulShutdown: SIGTERM while three renders run. The controller ends within the Pod's
// grace period, leaves no worker process, no staging directory of a render and no half-written
// artifact; started again on the same storage, it publishes every artifact.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	const shard = "shutdown"
	opts := fluxenv.KCLControllerOptions{
		Binary: suite.binary, Name: controllerName + "-shutdown", ServiceAccount: suite.install.serviceAccount(),
		Args: []string{"--enable-leader-election", "--watch-label-selector=" + shardKey + "=" + shard, "--concurrent=3"},
	}
	c, err := suite.env.StartKCLController(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t, "shutdown")
	rev, names := createShardApps(t, ns, shard, map[string]string{"main.k": slowProgram})
	pid := c.PID()
	waitFor(t, ns, "a render to be under way (a worker with a second of CPU)", func(context.Context) (bool, string, error) {
		busy := 0
		fluxenv.EachProcess(func(p int, s fluxenv.ProcStat) {
			if s.PPID == pid && s.CPU() > 100 {
				busy++
			}
		})
		return busy > 0, fmt.Sprintf("%d busy workers", busy), nil
	})

	// the kubelet signals the container's main process, not its group: workers get nothing
	stopped := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(terminationGracePeriod):
		_ = c.Stop(0)
		t.Fatalf("still running %s after SIGTERM", terminationGracePeriod)
	}
	t.Logf("SIGTERM during renders -> exited in %s", time.Since(stopped).Round(10*time.Millisecond))
	if _, err := c.Exited(); err != nil {
		t.Errorf("SIGTERM: the controller exited with %v, want 0", err)
	}
	fluxenv.EachProcess(func(p int, s fluxenv.ProcStat) {
		if s.PGRP == pid && !s.Gone() {
			t.Errorf("process %d (%s) of the controller's group outlived it", p, fluxenv.Cmdline(p))
		}
	})
	expectNoRenderDirs(t, filepath.Join(suite.env.WorkDir, opts.Name, "staging"))
	expectWholeArtifacts(t, c.StorageDir)

	restarted, err := suite.env.StartKCLController(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = suite.env.StopKCLController(restarted) })
	for _, name := range names {
		obj := waitKCLArtifactReady(t, ns, name, rev)
		expectArtifactServed(t, obj.Status.Artifact)
	}
	deleteKCLArtifacts(t, ns, names...)
}

// expectNoRenderDirs fails on a render's own directory (render-*) left in the staging root.
func expectNoRenderDirs(t *testing.T, root string) {
	t.Helper()
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), "render-") {
			t.Errorf("staging directory left behind: %s", p)
			return filepath.SkipDir
		}
		return nil
	})
}

// expectWholeArtifacts fails on a temporary file left in storage, or a tarball that does not
// read to its end.
func expectWholeArtifacts(t *testing.T, storage string) {
	t.Helper()
	_ = filepath.WalkDir(storage, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil || d.IsDir():
		case strings.Contains(d.Name(), ".tmp-"):
			t.Errorf("half-written file left in storage: %s", p)
		case strings.HasSuffix(d.Name(), ".tar.gz"):
			if err := readTarball(p); err != nil {
				t.Errorf("artifact %s: %v", p, err)
			}
		}
		return nil
	})
}

func readTarball(path string) error {
	b, err := os.ReadFile(path)
	if err == nil {
		_, err = untar(b)
	}
	return err
}
