package fluxplugin

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// The installs below run as a user's would: flux's own `plugin install` from a catalog served on
// 127.0.0.1 with the archive and manifest `make plugin-dist` writes (release/plugindist from the
// repository's plugins/kcl.yaml), and `make flux-plugin`.

const (
	distVersion = "v0.0.0-install-test" // stamped into the archive's flux-kcl
	makeVersion = "v0.0.0-make-test"    // stamped by make flux-plugin
)

// runFlux runs bin/flux-cli/flux with PATH, a HOME of its own, a kubeconfig of no cluster and
// env (whose entries win).
func runFlux(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(fluxBinary(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "KUBECONFIG=" + deadKubeconfig(t)}, env...)
	return runCmd(t, cmd)
}

func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%s: %v", strings.Join(cmd.Args, " "), err)
	}
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if exit != nil {
		r.code = exit.ExitCode()
	}
	t.Logf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(cmd.Args, " "), r.code, r.stdout, r.stderr)
	return r
}

// catalog writes the plugin's release into a directory served on 127.0.0.1, as the catalog base
// FLUXCD_PLUGIN_CATALOG names: catalog.yaml, kcl.yaml and the archive. It returns the base URL
// and the directory.
func catalog(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	base := srv.URL + "/"
	cmd := exec.Command("go", "run", "./release/plugindist", "--version", distVersion, "--out", dir,
		"--platforms", runtime.GOOS+"/"+runtime.GOARCH, "--url-base", base)
	cmd.Dir = repoRoot()
	if r := runCmd(t, cmd); r.code != 0 {
		t.Fatalf("release/plugindist exited %d", r.code)
	}
	return base, dir
}

func archiveName() string {
	return "flux-kcl_" + strings.TrimPrefix(distVersion, "v") + "_" + runtime.GOOS + "_" + runtime.GOARCH + ".tar.gz"
}

func TestInstallFromCatalog(t *testing.T) {
	base, _ := catalog(t)
	plugins := t.TempDir()
	env := []string{"FLUXCD_PLUGIN_CATALOG=" + base, "FLUXCD_PLUGINS=" + plugins}
	catalogVersion := strings.TrimPrefix(distVersion, "v")

	r := runFlux(t, env, "plugin", "search")
	if r.code != 0 || !regexp.MustCompile(`(?m)^kcl\s+KCLArtifacts of kcl-artifact-controller`).MatchString(r.stdout) {
		t.Errorf("flux plugin search (exit %d) does not list kcl from the catalog", r.code)
	}
	r = runFlux(t, env, "plugin", "install", "kcl")
	if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "✔ installed kcl v"+catalogVersion+"\n") {
		t.Fatalf("flux plugin install kcl: exit %d, want ✔ installed kcl v%s", r.code, catalogVersion)
	}
	st, err := os.Stat(filepath.Join(plugins, "flux-kcl"))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("installed flux-kcl: %v, mode %v; want mode 0755", err, st.Mode())
	}
	if _, err := os.Stat(filepath.Join(plugins, "flux-kcl.yaml")); err != nil {
		t.Errorf("no receipt of the install: %v", err)
	}
	r = runFlux(t, env, "plugin", "list")
	want := regexp.MustCompile(`(?m)^kcl\s+` + regexp.QuoteMeta(catalogVersion) + `\s+` + regexp.QuoteMeta(filepath.Join(plugins, "flux-kcl")) + `\s*$`)
	if r.code != 0 || !want.MatchString(r.stdout) {
		t.Errorf("flux plugin list (exit %d) does not show kcl %s at %s", r.code, catalogVersion, plugins)
	}
	r = runFlux(t, env, "kcl", "version", "--client")
	if r.code != 0 || r.stdout != "flux-kcl: "+distVersion+"\nkcl-engine: none (build and diff kclartifact run kcl-artifact-controller, not found)\n" {
		t.Errorf("flux kcl version --client: exit %d, stdout %q; want the catalog's build %s", r.code, r.stdout, distVersion)
	}
}

func TestInstallByDigest(t *testing.T) {
	base, dir := catalog(t)
	plugins := t.TempDir()
	env := []string{"FLUXCD_PLUGIN_CATALOG=" + base, "FLUXCD_PLUGINS=" + plugins}
	r := runFlux(t, env, "plugin", "install", "kcl@"+fileDigest(t, filepath.Join(dir, archiveName())))
	if r.code != 0 {
		t.Fatalf("flux plugin install kcl@<digest of the archive>: exit %d", r.code)
	}
	r = runFlux(t, env, "plugin", "install", "kcl@sha256:"+strings.Repeat("0", 64))
	if r.code != 1 || !strings.HasPrefix(r.stderr, "✗ ") {
		t.Errorf("flux plugin install kcl@<unknown digest>: exit %d, stderr %q; want exit 1 and one ✗ line", r.code, r.stderr)
	}
}

// A manifest whose checksum is not the archive's: flux refuses it and installs nothing.
func TestInstallRefusesAWrongChecksum(t *testing.T) {
	base, dir := catalog(t)
	manifest := filepath.Join(dir, "kcl.yaml")
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	actual := fileDigest(t, filepath.Join(dir, archiveName()))
	wrong := "sha256:" + strings.Repeat("0", 64)
	if !bytes.Contains(data, []byte("checksum: "+actual+"\n")) {
		t.Fatalf("kcl.yaml does not carry the archive's digest %s:\n%s", actual, data)
	}
	if err := os.WriteFile(manifest, bytes.Replace(data, []byte(actual), []byte(wrong), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	plugins := t.TempDir()
	r := runFlux(t, []string{"FLUXCD_PLUGIN_CATALOG=" + base, "FLUXCD_PLUGINS=" + plugins}, "plugin", "install", "kcl")
	want := "✗ checksum verification failed (expected: " + wrong + ", got: " + actual + ")\n"
	if r.code != 1 || !strings.HasSuffix(r.stderr, want) {
		t.Errorf("flux plugin install with a wrong checksum: exit %d, stderr %q; want exit 1 and %q", r.code, r.stderr, want)
	}
	if entries, _ := os.ReadDir(plugins); len(entries) != 0 {
		t.Errorf("a refused install left %v in the plugin directory", entries)
	}
}

func fileDigest(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// makeFluxPlugin runs `make flux-plugin` with HOME and, unless empty, FLUXCD_PLUGINS, and the
// build output in a directory of the test (BIN), so the repository's bin/ is left alone.
func makeFluxPlugin(t *testing.T, home, pluginsEnv string) result {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "flux-plugin", "BIN="+t.TempDir(), "VERSION="+makeVersion)
	cmd.Dir = repoRoot()
	// the Go caches stay the user's: only flux's view of HOME changes
	env := append(os.Environ(), "HOME="+home)
	for _, v := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		out, err := exec.Command("go", "env", v).Output()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, v+"="+strings.TrimSpace(string(out)))
	}
	env = append(env, "FLUXCD_PLUGINS="+pluginsEnv)
	cmd.Env = env
	return runCmd(t, cmd)
}

func TestMakeFluxPlugin(t *testing.T) {
	fluxBinary(t) // skips (fails under CI=true) before the build when flux is missing
	t.Run("FLUXCD_PLUGINS", func(t *testing.T) {
		plugins := filepath.Join(t.TempDir(), "not", "yet")
		r := makeFluxPlugin(t, t.TempDir(), plugins)
		if r.code != 0 || !strings.Contains(r.stdout, "installed "+filepath.Join(plugins, "flux-kcl")+" (flux-kcl: "+makeVersion+")") {
			t.Fatalf("make flux-plugin: exit %d; want it to say it installed %s/flux-kcl", r.code, plugins)
		}
		checkManual(t, plugins, "FLUXCD_PLUGINS="+plugins)
	})
	t.Run("HOME", func(t *testing.T) {
		home := t.TempDir()
		plugins := filepath.Join(home, ".fluxcd", "plugins")
		// a receipt of an earlier `flux plugin install`: it describes another binary now
		if err := os.MkdirAll(plugins, 0o755); err != nil {
			t.Fatal(err)
		}
		receipt := "name: kcl\nversion: 0.0.1\ninstalledAt: \"2026-01-01T00:00:00Z\"\nplatform:\n  os: linux\n  arch: amd64\n"
		if err := os.WriteFile(filepath.Join(plugins, "flux-kcl.yaml"), []byte(receipt), 0o644); err != nil {
			t.Fatal(err)
		}
		if r := makeFluxPlugin(t, home, ""); r.code != 0 {
			t.Fatalf("make flux-plugin without FLUXCD_PLUGINS: exit %d", r.code)
		}
		if _, err := os.Stat(filepath.Join(plugins, "flux-kcl.yaml")); !os.IsNotExist(err) {
			t.Errorf("the stale receipt is still there (%v)", err)
		}
		checkManual(t, plugins, "HOME="+home)
	})
}

// checkManual: flux, run with env, finds the plugin make installed in dir, lists it as a manual
// install (no receipt) and runs it.
func checkManual(t *testing.T, dir string, env ...string) {
	t.Helper()
	r := runFlux(t, env, "plugin", "list")
	want := regexp.MustCompile(`(?m)^kcl\s+manual\s+` + regexp.QuoteMeta(filepath.Join(dir, "flux-kcl")) + `\s*$`)
	if r.code != 0 || !want.MatchString(r.stdout) {
		t.Errorf("flux plugin list (exit %d) does not show kcl as manual at %s", r.code, dir)
	}
	r = runFlux(t, env, "kcl", "version", "--client")
	if r.code != 0 || r.stdout != "flux-kcl: "+makeVersion+"\nkcl-engine: none (build and diff kclartifact run kcl-artifact-controller, not found)\n" {
		t.Errorf("flux kcl version --client: exit %d, stdout %q; want make's build %s", r.code, r.stdout, makeVersion)
	}
}
