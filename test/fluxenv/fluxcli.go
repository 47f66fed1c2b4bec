package fluxenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	r := RunFluxIn(t, bin, pluginDir, kubeconfig, "", nil, args...)
	if strings.Contains(r.Stdout+r.Stderr, secret) {
		t.Errorf("flux %s printed the value of a KCLArtifact argument", strings.Join(args, " "))
	}
	return r
}

// RunFluxIn is RunFlux in the directory dir with env over its environment, for verbs that print
// rendered output (build, diff), which holds argument values by design.
func RunFluxIn(t testing.TB, bin, pluginDir, kubeconfig, dir string, env []string, args ...string) FluxResult {
	t.Helper()
	cmd := fluxCommand(t, bin, pluginDir, kubeconfig, args)
	cmd.Dir = dir
	cmd.Env = append(cmd.Env, env...)
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
	return r
}

// fluxCommand is flux with nothing of this machine's environment but PATH: a HOME of its own (no
// ~/.fluxcd, no ~/.kube), $FLUXCD_PLUGINS and $KUBECONFIG.
func fluxCommand(t testing.TB, bin, pluginDir, kubeconfig string, args []string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "FLUXCD_PLUGINS=" + pluginDir,
		"KUBECONFIG=" + kubeconfig}
	return cmd
}

// FluxProcess is a flux command that runs until interrupted (flux kcl ui, get --watch).
type FluxProcess struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *strings.Builder
}

// StartFlux starts flux as RunFlux runs it; its stdout comes line by line from Next.
func StartFlux(t testing.TB, bin, pluginDir, kubeconfig string, args ...string) *FluxProcess {
	t.Helper()
	p := &FluxProcess{cmd: fluxCommand(t, bin, pluginDir, kubeconfig, args), lines: make(chan string, 64), stderr: &strings.Builder{}}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			p.lines <- s.Text()
		}
		close(p.lines)
	}()
	return p
}

// Next is the next line of stdout; the test fails when none comes within timeout.
func (p *FluxProcess) Next(t testing.TB, what string, timeout time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("flux ended before printing %s; stderr %q", what, p.stderr.String())
		}
		return l
	case <-time.After(timeout):
		t.Fatalf("flux printed no %s within %s; stderr %q", what, timeout, p.stderr.String())
	}
	return ""
}

// Interrupt sends SIGINT, as Ctrl+C does, logs what flux printed on stderr and returns how it
// ended (nil for exit 0).
func (p *FluxProcess) Interrupt(t testing.TB) error {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		return err
	}
	err := p.cmd.Wait()
	t.Logf("flux %s: interrupted, stderr:\n%s", strings.Join(p.cmd.Args[1:], " "), p.stderr.String())
	if err != nil {
		return fmt.Errorf("%v, stderr %q", err, p.stderr.String())
	}
	return nil
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
