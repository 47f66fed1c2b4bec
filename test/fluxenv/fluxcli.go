package fluxenv

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// FluxResult is what one run of the flux CLI printed, and its exit code.
type FluxResult struct {
	Stdout, Stderr string
	Code           int
}

// RunFlux runs the flux CLI bin with the plugins of pluginDir ($FLUXCD_PLUGINS), kubeconfig and
// a HOME of its own, and logs what it printed. A run that prints secret fails the test: the
// plugin must never print a KCLArtifact's argument values.
func RunFlux(t testing.TB, bin, pluginDir, kubeconfig, secret string, args ...string) FluxResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "FLUXCD_PLUGINS=" + pluginDir,
		"KUBECONFIG=" + kubeconfig}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("flux %s: %v", strings.Join(args, " "), err)
	}
	r := FluxResult{Stdout: stdout.String(), Stderr: stderr.String()}
	if exit != nil {
		r.Code = exit.ExitCode()
	}
	t.Logf("flux %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	if strings.Contains(r.Stdout+r.Stderr, secret) {
		t.Errorf("flux %s printed the value of a KCLArtifact argument", strings.Join(args, " "))
	}
	return r
}
