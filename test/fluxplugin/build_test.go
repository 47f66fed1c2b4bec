package fluxplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/normalize"
	ssautil "github.com/fluxcd/pkg/ssa/utils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
	"github.com/kcl-flux/kcl-artifact-controller/test/kclapp"
)

// build kclartifact and diff kclartifact through flux, running the real
// kcl-artifact-controller render (bin/kcl-artifact-controller, with bin/libkcl.so beside it)
// against an envtest kube-apiserver.

// controllerBinary is bin/kcl-artifact-controller (make build), or the test skips (fails under CI=true).
func controllerBinary(t *testing.T) string {
	t.Helper()
	path := filepath.Join(repoRoot(), "bin", "kcl-artifact-controller")
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s missing under CI=true (make build): %v", path, err)
		}
		t.Skipf("SKIP: %s missing: make build", path)
	}
	return path
}

// fluxEnv runs flux as flux() does, in dir, with env over the environment and plugins of
// plugins. It does not check for argument values: build prints what the artifact holds.
func fluxEnv(t *testing.T, dir, plugins, kubeconfig string, env []string, args ...string) result {
	t.Helper()
	r := fluxenv.RunFluxIn(t, fluxBinary(t), plugins, kubeconfig, dir, env, args...)
	return result{stdout: r.Stdout, stderr: r.Stderr, code: r.Code}
}

// buildFixture is a cluster with KCLArtifact apps/app and a Git checkout of its source, the
// application of test/kclapp (which render's own tests print to the same output). The cluster's
// app has other arguments than the checkout's manifest (replicas 2, not 3) and argumentsFrom.
type buildFixture struct {
	c                         client.Client
	kubeconfig, checkout      string
	onPath                    []string // PATH with a directory holding kcl-artifact-controller
	controller, fluxPluginDir string
}

func newBuildFixture(t *testing.T) *buildFixture {
	t.Helper()
	fluxBinary(t)
	f := &buildFixture{controller: controllerBinary(t), fluxPluginDir: pluginDir}
	cfg, kc := startClusterConfig(t)
	f.kubeconfig = kc
	installCRDs(t, cfg)
	f.c = newClient(t, cfg)
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: "apps"} }
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}},
		&corev1.ConfigMap{ObjectMeta: meta("settings"), Data: map[string]string{"greeting": "hello"}},
		&corev1.Secret{ObjectMeta: meta("creds"), StringData: map[string]string{"password": secretValue}},
		&kclv1.KCLArtifact{ObjectMeta: meta("app"), Spec: kclv1.KCLArtifactSpec{
			SourceRef: kclv1.SourceReference{Kind: "GitRepository", Name: "repo"}, Interval: metav1.Duration{Duration: time.Minute},
			Path: "./deploy", Arguments: map[string]string{"replicas": "2"},
			ArgumentsFrom: []kclv1.ArgumentsReference{{Kind: "ConfigMap", Name: "settings"}, {Kind: "Secret", Name: "creds"}},
			// the objects are compared as rendered: this test applies them itself
			Kustomization: &kclv1.KustomizationTemplate{Disabled: true}}},
	} {
		if err := f.c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
	f.checkout = t.TempDir()
	kclapp.Checkout(t, f.checkout, kclapp.Source())
	// a link, as an installer would make: render finds the engine beside its real path
	bin := t.TempDir()
	if err := os.Symlink(f.controller, filepath.Join(bin, "kcl-artifact-controller")); err != nil {
		t.Fatal(err)
	}
	f.onPath = []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
	return f
}

// rendering is what the program prints: on stderr, as the render passes it, never in the YAML.
const rendering = "rendering\n"

func (f *buildFixture) flux(t *testing.T, args ...string) result {
	t.Helper()
	return fluxEnv(t, f.checkout, f.fluxPluginDir, f.kubeconfig, f.onPath, args...)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// expect asserts the exit code and the exact stdout and stderr.
func expect(t *testing.T, what string, r result, code int, stdout, stderr string) {
	t.Helper()
	if r.code != code || r.stdout != stdout || r.stderr != stderr {
		t.Errorf("%s: exit %d, stdout:\n%s\nstderr %q\nwant exit %d, stdout:\n%s\nstderr %q", what, r.code, r.stdout, r.stderr,
			code, stdout, stderr)
	}
}

func TestBuildKCLArtifact(t *testing.T) {
	f := newBuildFixture(t)

	// arguments, and argumentsFrom read from the cluster; the Secret's value is in the output,
	// as in the artifact, and nowhere else
	r := f.flux(t, "kcl", "build", "kclartifact", "app", "-n", "apps", "--path", ".")
	expect(t, "build", r, 0, kclapp.Published("hello", "2", secretValue), rendering)

	// the manifest needs no cluster: it has no argumentsFrom
	r = fluxEnv(t, f.checkout, pluginDir, deadKubeconfig(t), f.onPath,
		"kcl", "build", "kclartifact", "app", "-n", "apps", "--path", f.checkout, "--kclartifact-file", "clusters/app.yaml")
	expect(t, "build --kclartifact-file", r, 0, kclapp.Published("hi", "3", "none"), rendering)

	r = f.flux(t, "-n", "apps", "kcl", "build", "kclartifact", "app", "--path", ".", "--phase", "pre")
	expect(t, "build --phase pre", r, 0, kclapp.Pre, rendering)

	// found through $KCL_ARTIFACT_CONTROLLER, and beside the plugin, with nothing on PATH
	r = fluxEnv(t, f.checkout, pluginDir, f.kubeconfig, []string{"KCL_ARTIFACT_CONTROLLER=" + f.controller},
		"kcl", "build", "kclartifact", "app", "-n", "apps", "--path", ".", "--phase", "pre")
	expect(t, "build with $KCL_ARTIFACT_CONTROLLER", r, 0, kclapp.Pre, rendering)
	beside := t.TempDir()
	copyFile(t, filepath.Join(pluginDir, "flux-kcl"), filepath.Join(beside, "flux-kcl"))
	if err := os.Symlink(f.controller, filepath.Join(beside, "kcl-artifact-controller")); err != nil {
		t.Fatal(err)
	}
	r = fluxEnv(t, f.checkout, beside, f.kubeconfig, nil, "kcl", "build", "kclartifact", "app", "-n", "apps", "--path", ".", "--phase", "pre")
	expect(t, "build beside the plugin", r, 0, kclapp.Pre, rendering)

	t.Run("errors", func(t *testing.T) { testBuildErrors(t, f) })
	t.Run("hostile program", func(t *testing.T) { testBuildHostile(t, f) })
	t.Run("completion", func(t *testing.T) {
		comps, directive := completions(t, f.flux(t, "__complete", "-n", "apps", "kcl", "build", "kclartifact", ""))
		if directive != ":4" || strings.Join(comps, ",") != "app" {
			t.Errorf("completion of build kclartifact: %q %s, want app :4", comps, directive)
		}
	})
}

func testBuildErrors(t *testing.T, f *buildFixture) {
	missing := "✗ flux kcl build needs kcl-artifact-controller (it carries the KCL engine): put it on PATH or set KCL_ARTIFACT_CONTROLLER\n"
	r := fluxEnv(t, f.checkout, pluginDir, f.kubeconfig, nil, "kcl", "build", "kclartifact", "app", "-n", "apps", "--path", ".")
	expect(t, "no kcl-artifact-controller", r, 1, "", missing)
	r = fluxEnv(t, f.checkout, pluginDir, f.kubeconfig, nil, "kcl", "diff", "kclartifact", "app", "-n", "apps", "--path", ".")
	expect(t, "diff, no kcl-artifact-controller", r, 2, "", strings.Replace(missing, "flux kcl build", "flux kcl diff kclartifact", 1))

	expect(t, "unknown KCLArtifact", f.flux(t, "kcl", "build", "kclartifact", "nope", "-n", "apps", "--path", "."),
		1, "", "✗ KCLArtifact object 'nope' not found in apps namespace\n")
	expect(t, "diff, unknown KCLArtifact", f.flux(t, "kcl", "diff", "kclartifact", "nope", "-n", "apps", "--path", "."),
		2, "", "✗ KCLArtifact object 'nope' not found in apps namespace\n")
	expect(t, "no --path", f.flux(t, "kcl", "build", "kclartifact", "app", "-n", "apps"),
		1, "", "✗ invalid resource path \"\": --path is the directory the KCLArtifact's source is checked out in\n")
	expect(t, "no name", f.flux(t, "kcl", "build", "kclartifact", "--path", "."), 1, "", "✗ KCLArtifact name is required\n")
	expect(t, "--server", f.flux(t, "--server", "https://127.0.0.1:1", "kcl", "build", "kclartifact", "app", "--path", "."),
		1, "", "✗ --server: kcl-artifact-controller render reads the cluster from the kubeconfig only (--kubeconfig, --context)\n")
	// the render's own errors and codes pass through: 2 for a usage error
	r = f.flux(t, "kcl", "build", "kclartifact", "app", "-n", "apps", "--path", ".", "--phase", "later")
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, `--phase: "later" is not pre, main or post`) {
		t.Errorf("bad --phase: exit %d, stderr %q", r.code, r.stderr)
	}
}

// A program under build is confined as render confines a checkout under review: it reads
// neither the checkout's .git (its token) nor files outside it, and the build fails.
func testBuildHostile(t *testing.T, f *buildFixture) {
	outside := filepath.Join(t.TempDir(), "secret.txt")
	writeFile(t, outside, "SECRET-OUTSIDE-THE-CHECKOUT")
	for name, expr := range map[string]string{
		"../.git":       `file.read("../.git/config")`,
		"absolute .git": `file.read("` + filepath.Join(f.checkout, ".git", "config") + `")`,
		"outside":       `file.read("` + outside + `")`,
		"environment":   `file.read("/proc/self/environ")`,
	} {
		writeFile(t, filepath.Join(f.checkout, kclapp.ProgramPath),
			"import file\n\n[{apiVersion = \"v1\", kind = \"ConfigMap\", metadata.name = \"leak\", data.v = str("+expr+")}]\n")
		r := f.flux(t, "kcl", "build", "kclartifact", "app", "-n", "apps", "--path", ".")
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "EvaluationError") ||
			strings.Contains(r.stderr, "eC1hY2Nlc3MtdG9rZW46") || strings.Contains(r.stderr, "SECRET-OUTSIDE") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q: want the read refused (exit 1)", name, r.code, r.stdout, r.stderr)
		}
	}
	writeFile(t, filepath.Join(f.checkout, kclapp.ProgramPath), kclapp.Program)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestDiffKCLArtifact(t *testing.T) {
	f := newBuildFixture(t)
	diff := func(t *testing.T, args ...string) result {
		t.Helper()
		r := f.flux(t, append([]string{"kcl", "diff", "kclartifact", "app", "-n", "apps", "--path", "."}, args...)...)
		if strings.Contains(r.stdout+r.stderr, secretValue) {
			t.Errorf("the diff printed the value of the Secret")
		}
		return r
	}

	r := diff(t)
	if r.code != 1 || !strings.HasPrefix(r.stdout, "# 3 added, 0 removed, 0 changed, 0 unchanged\n") ||
		!strings.Contains(r.stdout, "+++ b/Secret/apps/app-creds\n") || !strings.Contains(r.stdout, "+  password: '***'\n") {
		t.Errorf("nothing applied: exit %d, want 1 and 3 added, Secret masked", r.code)
	}

	// apply what the build prints as kustomize-controller would: then nothing differs
	build := f.flux(t, "kcl", "build", "kclartifact", "app", "-n", "apps", "--path", ".")
	applyAsKustomizeController(t, f.c, build.stdout)
	// the render says why the objects are compared as rendered
	disabled := "KCLArtifact apps/app generates no Kustomization: the objects are compared as rendered\n" + rendering
	expect(t, "applied", diff(t), 0, "# no changes (3 unchanged)\n", disabled)

	// the Secret the argument comes from, and the program, change
	creds := &corev1.Secret{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "apps", Name: "creds"}, creds); err != nil {
		t.Fatal(err)
	}
	creds.Data["password"] = []byte(secretValue + "-two")
	if err := f.c.Update(context.Background(), creds); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(f.checkout, kclapp.ProgramPath), strings.Replace(kclapp.Program, "replicas = _replicas}", `replicas = _replicas, extra = "1"}`, 1))
	r = diff(t)
	if r.code != 1 || r.stderr != disabled {
		t.Errorf("changed: exit %d, stderr %q; want 1 and %q", r.code, r.stderr, disabled)
	}
	for _, want := range []string{"# 0 added, 0 removed, 2 changed, 1 unchanged\n", "+++ b/ConfigMap/apps/app-config\n", "+  extra: \"1\"\n",
		"--- a/Secret/apps/app-creds\n", "-  password: '***'\n", "+  password: '*** (changed)'\n"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("changed: stdout lacks %q", want)
		}
	}
	r = diff(t, "-o", "markdown")
	if r.code != 1 || !strings.Contains(r.stdout, "<details>") {
		t.Errorf("-o markdown: exit %d, want 1 and a comment", r.code)
	}

	// against the last commit, with no cluster: the manifest of each checkout
	r = fluxEnv(t, f.checkout, pluginDir, deadKubeconfig(t), f.onPath, "kcl", "diff", "kclartifact", "app", "-n", "apps",
		"--path", ".", "--kclartifact-file", "clusters/app.yaml", "--from", "HEAD")
	if r.code != 1 || !strings.HasPrefix(r.stdout, "# 0 added, 0 removed, 1 changed, 2 unchanged\n") || !strings.Contains(r.stdout, "+  extra: \"1\"\n") {
		t.Errorf("--from HEAD: exit %d, want 1 and the ConfigMap changed", r.code)
	}
	kclapp.Git(t, f.checkout, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "extra")
	r = fluxEnv(t, f.checkout, pluginDir, deadKubeconfig(t), f.onPath, "kcl", "diff", "kclartifact", "app", "-n", "apps",
		"--path", ".", "--kclartifact-file", "clusters/app.yaml", "--from", "HEAD")
	// a render of each checkout, each printing on stderr
	expect(t, "--from HEAD, committed", r, 0, "# no changes (3 unchanged)\n", rendering+rendering)

	t.Run("completion", func(t *testing.T) {
		comps, directive := completions(t, f.flux(t, "__complete", "-n", "apps", "kcl", "diff", "kclartifact", ""))
		if directive != ":4" || strings.Join(comps, ",") != "app" {
			t.Errorf("completion of diff kclartifact: %q %s, want app :4", comps, directive)
		}
	})
}

// applyAsKustomizeController applies a YAML stream as kustomize-controller does: normalized, in
// apply order, by server-side apply as its field manager.
func applyAsKustomizeController(t *testing.T, c client.Client, stream string) {
	t.Helper()
	objs, err := ssautil.ReadObjects(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if err := normalize.UnstructuredList(objs); err != nil {
		t.Fatal(err)
	}
	mgr := ssa.NewResourceManager(c, nil, ssa.Owner{Field: "kustomize-controller", Group: "kustomize.toolkit.fluxcd.io"})
	if _, err := mgr.ApplyAll(context.Background(), objs, ssa.DefaultApplyOptions()); err != nil {
		t.Fatal(err)
	}
}

// TestVersionNamesTheLocalEngine: version names the engine build and diff kclartifact would use,
// that of the kcl-artifact-controller they run; a binary that cannot start is said, not hidden.
func TestVersionNamesTheLocalEngine(t *testing.T) {
	controller := controllerBinary(t)
	r := fluxEnv(t, t.TempDir(), pluginDir, deadKubeconfig(t), []string{"KCL_ARTIFACT_CONTROLLER=" + controller},
		"kcl", "version", "--client")
	if want := "kcl-engine: 0.12.1 (through " + controller + ")\n"; r.code != 0 || !strings.HasSuffix(r.stdout, want) {
		t.Errorf("version --client with the controller binary: exit %d, stdout %q; want it to end with %q", r.code, r.stdout, want)
	}
	broken := filepath.Join(t.TempDir(), "kcl-artifact-controller")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho no engine here >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = fluxEnv(t, t.TempDir(), pluginDir, deadKubeconfig(t), []string{"KCL_ARTIFACT_CONTROLLER=" + broken}, "kcl", "version", "--client")
	want, warning := "kcl-engine: unavailable\n", "⚠️ "+broken+" version: no engine here (exit status 3)\n"
	if r.code != 0 || !strings.HasSuffix(r.stdout, want) || r.stderr != warning {
		t.Errorf("version --client with a broken binary: exit %d, stdout %q, stderr %q; want stdout to end with %q, stderr %q",
			r.code, r.stdout, r.stderr, want, warning)
	}
}
