// Package fluxplugin tests flux-kcl through the real flux CLI (bin/flux-cli/flux, built by
// `make fluxcli`): discovery in $FLUXCD_PLUGINS, the exec of `flux kcl ...`, exit codes, and
// completion through `flux __complete kcl ...`. Without bin/flux-cli/flux the tests skip, except
// under CI=true, where its absence is a failure.
package fluxplugin

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// pluginVersion is stamped into the plugin this test builds, to tell it from any other flux-kcl.
const pluginVersion = "v0.0.0-fluxplugin-test"

// pluginDir holds the flux-kcl TestMain builds; it is $FLUXCD_PLUGINS of every run.
var pluginDir string

func TestMain(m *testing.M) {
	code, err := buildAndRun(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fluxplugin:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func buildAndRun(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "fluxplugin-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	pluginDir = dir
	if err := fluxenv.BuildPlugin(repoRoot(), dir, pluginVersion); err != nil {
		return 0, err
	}
	return m.Run(), nil
}

func repoRoot() string {
	root, err := filepath.Abs("../..")
	if err != nil {
		panic(err)
	}
	return root
}

// fluxBinary is bin/flux-cli/flux, or the test skips (fails under CI=true).
func fluxBinary(t *testing.T) string {
	t.Helper()
	path := filepath.Join(repoRoot(), "bin", "flux-cli", "flux")
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s missing under CI=true (make fluxcli): %v", path, err)
		}
		t.Skipf("SKIP: %s missing: `make fluxcli` builds the flux CLI v2.9.5 from the Go module proxy", path)
	}
	return path
}

type result struct {
	stdout, stderr string
	code           int
}

// flux runs the real flux CLI with the plugin directory, a HOME of its own and kubeconfig.
func flux(t *testing.T, kubeconfig string, args ...string) result {
	t.Helper()
	r := fluxenv.RunFlux(t, fluxBinary(t), pluginDir, kubeconfig, secretValue, args...)
	return result{stdout: r.Stdout, stderr: r.Stderr, code: r.Code}
}

// deadKubeconfig points at a port nothing listens on: no cluster reachable.
func deadKubeconfig(t *testing.T) string {
	t.Helper()
	return deadKubeconfigNS(t, "")
}

// deadKubeconfigNS is deadKubeconfig with ns as the namespace of its context.
func deadKubeconfigNS(t *testing.T, ns string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := `apiVersion: v1
kind: Config
clusters:
- name: dead
  cluster: {server: "https://127.0.0.1:1"}
contexts:
- name: dead
  context: {cluster: dead, user: dead, namespace: "` + ns + `"}
users:
- name: dead
  user: {token: none}
current-context: dead
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestVersionWithoutCluster(t *testing.T) {
	kc := deadKubeconfig(t)
	fluxVersion := flux(t, kc, "version")
	if fluxVersion.code == 0 {
		t.Fatalf("flux version without a cluster exited 0; this test assumes it fails")
	}
	r := flux(t, kc, "kcl", "version")
	if r.code != fluxVersion.code {
		t.Errorf("flux kcl version exited %d without a cluster, flux version %d", r.code, fluxVersion.code)
	}
	want := "flux-kcl: " + pluginVersion + "\nkcl-artifact-controller: unknown\nkcl-engine: none (build and diff kclartifact run kcl-artifact-controller, not found)\n"
	if r.stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, want)
	}
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "✗ ") || !strings.Contains(lines[0], "127.0.0.1:1") {
		t.Errorf("stderr should be one ✗ line naming the unreachable server, got %q", r.stderr)
	}
}

func TestVersionClientAndGlobalFlags(t *testing.T) {
	kc := deadKubeconfig(t)
	// flux's own global flags may come before the plugin name (flux passes them on); -A is
	// not one of flux's root flags, so it must follow `kcl`
	r := flux(t, kc, "--context", "dead", "--kubeconfig", kc, "--timeout", "2s", "--verbose", "-n", "apps",
		"--ns-follows-kube-context", "--kube-api-qps", "10", "--kube-api-burst", "20",
		"kcl", "version", "--client", "-A", "-o", "json")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("flux kcl version --client: exit %d, stderr %q", r.code, r.stderr)
	}
	var info map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil {
		t.Fatalf("-o json: %v\n%s", err, r.stdout)
	}
	want := map[string]string{"flux-kcl": pluginVersion, "kcl-engine": "none (build and diff kclartifact run kcl-artifact-controller, not found)"}
	if fmt.Sprint(info) != fmt.Sprint(want) {
		t.Errorf("version --client -o json = %v, want %v", info, want)
	}
}

func TestErrorsExitOne(t *testing.T) {
	kc := deadKubeconfig(t)
	badNS := deadKubeconfigNS(t, "Ctx_NS")
	for name, tc := range map[string]struct {
		args   []string
		stderr string
	}{
		// flux skips its own namespace check for plugins: the plugin does it
		"context namespace": {[]string{"--ns-follows-kube-context", "--kubeconfig", badNS, "kcl", "version", "--client"},
			`✗ namespace must be a valid DNS label: "Ctx_NS"` + "\n"},
		"unknown verb":      {[]string{"kcl", "bogus"}, `✗ unknown command "bogus" for "flux kcl"` + "\n"},
		"invalid namespace": {[]string{"kcl", "version", "--client", "-n", "Not_A_Label"}, `✗ namespace must be a valid DNS label: "Not_A_Label"` + "\n"},
		"bad output":        {[]string{"kcl", "version", "--client", "-o", "table"}, "✗ --output must be json or yaml, not table\n"},
		"unknown flag":      {[]string{"kcl", "version", "--bogus"}, "✗ unknown flag: --bogus\n"},
	} {
		t.Run(name, func(t *testing.T) {
			r := flux(t, kc, tc.args...)
			if r.code != 1 || r.stderr != tc.stderr || r.stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 1, no stdout, stderr %q", r.code, r.stdout, r.stderr, tc.stderr)
			}
		})
	}
}

func TestFluxListsThePlugin(t *testing.T) {
	r := flux(t, deadKubeconfig(t), "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "Plugin Commands:\n  kcl ") {
		t.Errorf("flux --help (exit %d) does not list kcl under Plugin Commands:\n%s", r.code, r.stdout)
	}
}

func TestCompletion(t *testing.T) {
	kc := deadKubeconfig(t)
	t.Run("verbs", func(t *testing.T) {
		r := flux(t, kc, "__complete", "kcl", "")
		comps, directive := completions(t, r)
		if directive != ":4" || !contains(comps, "version\t") {
			t.Errorf("flux __complete kcl \"\": completions %q, directive %s; want version and :4 (no file completion)", comps, directive)
		}
	})
	t.Run("flags of a verb", func(t *testing.T) {
		r := flux(t, kc, "__complete", "kcl", "version", "--o")
		comps, directive := completions(t, r)
		if directive != ":4" || !contains(comps, "--output\t") {
			t.Errorf("flux __complete kcl version --o: completions %q, directive %s; want --output", comps, directive)
		}
	})
}

// completions splits cobra's __complete output: completion lines, then ":<directive>".
func completions(t *testing.T, r result) ([]string, string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("__complete exited %d", r.code)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

func contains(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

func TestPluginDoesNotLinkTheEngine(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./cmd/flux-kcl")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "runtime/cgo" || strings.Contains(pkg, "purego") || strings.Contains(pkg, "/internal/kcl") ||
			strings.Contains(pkg, "/internal/render") {
			t.Errorf("flux-kcl links %s", pkg)
		}
	}
}
