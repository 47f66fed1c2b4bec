package fluxenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// BuildPlugin builds flux-kcl into dir, which serves as $FLUXCD_PLUGINS, with version stamped
// when it is not empty. CGO_ENABLED=0: the plugin is a static binary, as flux is, and never links
// the KCL engine.
func BuildPlugin(repo, dir, version string) error {
	args := []string{"build", "-o", filepath.Join(dir, "flux-kcl")}
	if version != "" {
		args = append(args, "-ldflags", "-X github.com/kcl-flux/kcl-artifact-controller/internal/version.Version="+version)
	}
	cmd := exec.Command("go", append(args, "./cmd/flux-kcl")...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building flux-kcl: %v\n%s", err, out)
	}
	return nil
}
