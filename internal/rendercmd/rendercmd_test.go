package rendercmd

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcl-flux/kcl-artifact-controller/internal/depfetch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
)

// The test binary doubles as the engine worker that render re-executes.
func TestMain(m *testing.M) {
	kclworker.ServeIfWorker()
	depfetch.ServeIfFetcher()
	if os.Getenv(kcllib.EnvLib) == "" {
		lib, _ := filepath.Abs(filepath.Join("..", "..", "bin", kcllib.LibName))
		os.Setenv(kcllib.EnvLib, lib)
	}
	os.Exit(m.Run())
}

func files(t *testing.T, fs map[string]string) string {
	t.Helper()
	return kclmodtest.WriteFiles(t, t.TempDir(), fs)
}

func runRender(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	wd, _ := os.Getwd()
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return o.String(), e.String(), code
}

func TestDirectoryUsesProfileEntries(t *testing.T) {
	dir := files(t, map[string]string{
		"kcl.mod":   "[package]\nname = \"p\"\n[profile]\nentries = [\"base.k\", \"main.k\"]\n",
		"base.k":    "schema S:\n    v: int\n",
		"main.k":    "s = S {v = 1}\n",
		"unused.k":  "broken = \n",
		"sub/.keep": "",
	})
	out, errOut, code := runRender(t, dir, ".")
	if code != 0 || strings.TrimSpace(out) != "s:\n  v: 1" {
		t.Fatalf("code %d out %q err %q", code, out, errOut)
	}
}

func TestDirectoryWithoutModUsesItsFilesButNotTests(t *testing.T) {
	dir := files(t, map[string]string{
		"a.k":      "a = 1\n",
		"b.k":      "b = a + 1\n",
		"a_test.k": "broken = \n",
	})
	out, errOut, code := runRender(t, t.TempDir(), dir, "--sort_keys")
	if code != 0 || strings.TrimSpace(out) != "a: 1\nb: 2" {
		t.Fatalf("code %d out %q err %q", code, out, errOut)
	}
}

func TestArgumentsAreTypedAsKCLTypesThem(t *testing.T) {
	dir := files(t, map[string]string{"main.k": "" +
		"i = option(\"i\")\nb = option(\"b\")\nn = option(\"n\")\nl = option(\"l\")\ns = option(\"s\")\n"})
	out, errOut, code := runRender(t, dir, "main.k", "--format", "json",
		"-D", "i=3", "-D", "b=True", "-D", "n=None", "-D", "l=[1,2]", "-D", "s=hello")
	if code != 0 {
		t.Fatalf("code %d err %q", code, errOut)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got["i"] != 3.0 || got["b"] != true || got["n"] != nil || len(got["l"].([]any)) != 2 || got["s"] != "hello" {
		t.Fatalf("arguments typed wrongly: %#v", got)
	}
}

func TestSettingsPathsAreRelativeToTheSettingsFile(t *testing.T) {
	dir := files(t, map[string]string{
		"pkg/main.k":   "x = option(\"x\")\ny = None\n",
		"pkg/kcl.yaml": "kcl_cli_configs:\n  files:\n    - main.k\n  disable_none: true\nkcl_options:\n  - key: x\n    value: 5\n",
	})
	// Run from elsewhere: the settings' files resolve against pkg/, not the process directory.
	out, errOut, code := runRender(t, t.TempDir(), "-Y", filepath.Join(dir, "pkg", "kcl.yaml"))
	if code != 0 || strings.TrimSpace(out) != "x: 5" {
		t.Fatalf("code %d out %q err %q", code, out, errOut)
	}
}

func TestPrintComesFirstAndOutputFile(t *testing.T) {
	dir := files(t, map[string]string{"main.k": "print(\"hello\")\na = 1\n"})
	out, _, code := runRender(t, dir, "main.k", "-o", "out.yaml")
	if code != 0 || out != "hello\n" {
		t.Fatalf("code %d stdout %q", code, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out.yaml"))
	if err != nil || string(b) != "a: 1\n" {
		t.Fatalf("output file: %q %v", b, err)
	}
}

func TestOverridesSelectorsAndExternals(t *testing.T) {
	dir := files(t, map[string]string{
		"main.k":          "import lib\ncfg = {name = lib.name, replicas = 1}\nother = 2\n",
		"ext/lib/kcl.mod": "[package]\nname = \"lib\"\n",
		"ext/lib/l.k":     "name = \"from-lib\"\n",
	})
	out, errOut, code := runRender(t, dir, "main.k", "-E", "lib=ext/lib",
		"-O", "cfg.replicas=3", "-S", "cfg")
	if code != 0 || strings.TrimSpace(out) != "name: from-lib\nreplicas: 3" {
		t.Fatalf("code %d out %q err %q", code, out, errOut)
	}
}

func TestKCLErrorGoesToStderrWithLocation(t *testing.T) {
	dir := files(t, map[string]string{"main.k": "a: int = \"x\"\n"})
	out, errOut, code := runRender(t, dir, "main.k")
	if code != 1 || out != "" {
		t.Fatalf("code %d stdout %q", code, out)
	}
	if !strings.Contains(errOut, "error[E2G22]: TypeError") || !strings.Contains(errOut, filepath.Join(dir, "main.k")+":1:") {
		t.Fatalf("stderr lacks the error code or file:line: %q", errOut)
	}
	if strings.Contains(errOut, "\x1b[") {
		t.Fatalf("stderr carries ANSI codes: %q", errOut)
	}
}

func TestBadFlagsAndArguments(t *testing.T) {
	dir := files(t, map[string]string{"main.k": "a = 1\n"})
	if _, _, code := runRender(t, dir, "main.k", "--format", "xml"); code != 2 {
		t.Fatalf("bad --format: code %d", code)
	}
	if _, e, code := runRender(t, dir, "main.k", "-D", "k=v=w"); code != 1 || !strings.Contains(e, "Invalid value for top level arguments") {
		t.Fatalf("bad -D: code %d %q", code, e)
	}
	if _, e, code := runRender(t, dir, "missing.k"); code != 1 || !strings.Contains(e, "missing.k") {
		t.Fatalf("missing file: code %d %q", code, e)
	}
}

func TestMissingEngineSaysWhereItLooked(t *testing.T) {
	dir := files(t, map[string]string{"main.k": "a = 1\n"})
	_, e, code := runRender(t, dir, "main.k", "--kcl-lib", "/nonexistent/libkcl.so")
	if code != 2 || !strings.Contains(e, "/nonexistent/libkcl.so") || !strings.Contains(e, "make libkcl") {
		t.Fatalf("code %d %q", code, e)
	}
}

func TestDependencyFromTheDefaultRegistry(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	lib := kclmodtest.WritePackage(t, t.TempDir(), "k8s", "1.31.2", nil, map[string]string{
		"api/core/v1/config_map.k": "schema ConfigMap:\n    apiVersion: str = \"v1\"\n    kind: str = \"ConfigMap\"\n    metadata: {str:any}\n",
	})
	if _, err := reg.PushPackage(context.Background(), reg.Host+"/kcl-lang/k8s:1.31.2", lib, kclmodtest.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := files(t, map[string]string{
		"kcl.mod": "[package]\nname = \"app\"\nedition = \"v0.11.0\"\nversion = \"0.1.0\"\n\n[dependencies]\nk8s = \"1.31.2\"\n",
		"main.k":  "import k8s.api.core.v1 as core\n\ncm = core.ConfigMap {metadata.name = \"x\"}\n",
	})
	cache := t.TempDir()
	args := []string{".", "--default-registry", reg.Host, "--deps-cache-dir", cache, "--registry-config", "",
		"--deps-allowed-networks", "127.0.0.0/8"}
	out, errOut, code := runRender(t, dir, args...)
	want := "cm:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: x"
	if code != 0 || strings.TrimSpace(out) != want {
		t.Fatalf("code %d out %q err %q", code, out, errOut)
	}
	blobs := reg.BlobGets()
	// The same cache on a second render: nothing is downloaded again.
	if out, errOut, code = runRender(t, dir, args...); code != 0 || strings.TrimSpace(out) != want {
		t.Fatalf("second render: code %d out %q err %q", code, out, errOut)
	}
	if reg.BlobGets() != blobs {
		t.Fatalf("the second render downloaded again: %d blob GETs, then %d", blobs, reg.BlobGets())
	}
	// Remote dependencies forbidden: a clear error naming the dependency.
	_, errOut, code = runRender(t, dir, append(args, "--no-remote-deps")...)
	if code != 1 || !strings.Contains(errOut, "k8s") {
		t.Fatalf("with --no-remote-deps: code %d err %q", code, errOut)
	}
}

// --sandbox renders as the controller does: the working tree and its dependencies, nothing else.
func TestSandboxFlagConfinesTheRender(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret.txt")
	if err := os.WriteFile(secret, []byte("laptop-secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := files(t, map[string]string{
		"main.k":      "import file\nimport yaml\nv = yaml.decode(file.read(\"values.yaml\"))\n",
		"values.yaml": "replicas: 3\n",
		"leak.k":      "import file\ns = file.read(\"" + secret + "\")\n",
	})
	out, errOut, code := runRender(t, dir, "--sandbox", "main.k")
	if code != 0 || !strings.Contains(out, "replicas: 3") {
		t.Fatalf("a relative read inside the tree must work: code %d out %q err %q", code, out, errOut)
	}
	// without --sandbox the read succeeds, as with kcl run
	if out, _, code := runRender(t, dir, "leak.k"); code != 0 || !strings.Contains(out, "laptop-secret") {
		t.Fatalf("unconfined render should read the file: %d %q", code, out)
	}
	out, errOut, code = runRender(t, dir, "--sandbox", "leak.k")
	if code == 0 || strings.Contains(out+errOut, "laptop-secret") || !strings.Contains(errOut, "Permission denied") {
		t.Fatalf("confined, the read must be refused: code %d out %q err %q", code, out, errOut)
	}
	_, errOut, code = runRender(t, dir, "--sandbox", secret)
	if code == 0 || !strings.Contains(errOut, "outside the source") && !strings.Contains(errOut, "not inside the source root") {
		t.Fatalf("an input outside the tree must be refused: code %d err %q", code, errOut)
	}
}

// --phase prints one deploy phase as the artifact's <phase>/manifests.yaml holds it: the pre
// Job carries the revision, hooks that are not run are left out.
func TestPhasePrintsOnePhase(t *testing.T) {
	dir := files(t, map[string]string{"main.k": `[
    {apiVersion = "batch/v1", kind = "Job", metadata = {name = "migrate", annotations = {"kcl.contrib.fluxcd.io/phase" = "pre"}}, spec.template.spec.restartPolicy = "Never"}
    {apiVersion = "v1", kind = "ConfigMap", metadata.name = "app"}
    {apiVersion = "batch/v1", kind = "Job", metadata = {name = "cleanup", annotations = {"helm.sh/hook" = "pre-delete"}}}
]
`})
	out, errOut, code := runRender(t, dir, "main.k", "--phase", "pre")
	if code != 0 || !strings.Contains(out, "name: migrate") || strings.Contains(out, "name: app") ||
		strings.Contains(out, "cleanup") || !strings.Contains(out, "kcl.contrib.fluxcd.io/revision: sha256:") {
		t.Fatalf("--phase pre: code %d out %q err %q", code, out, errOut)
	}
	out, errOut, code = runRender(t, dir, "main.k", "--phase", "main")
	if code != 0 || strings.TrimSpace(out) != "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app" {
		t.Fatalf("--phase main: code %d out %q err %q", code, out, errOut)
	}
	if _, e, code := runRender(t, dir, "main.k", "--phase", "later"); code != 2 || !strings.Contains(e, `"later" is not pre, main or post`) {
		t.Fatalf("bad --phase: code %d %q", code, e)
	}
	if _, e, code := runRender(t, dir, "main.k", "--phase", "pre", "--format", "json"); code != 2 || !strings.Contains(e, "--phase needs --format yaml") {
		t.Fatalf("--phase with json: code %d %q", code, e)
	}
}

// --diff compares what the controller would apply: not the hooks it does not run; with --phase,
// one phase.
func TestDiffComparesAppliedObjects(t *testing.T) {
	objs, err := manifests.Parse([]byte(`apiVersion: batch/v1
kind: Job
metadata: {name: migrate, annotations: {argocd.argoproj.io/hook: PreSync}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: cleanup, annotations: {argocd.argoproj.io/hook: PostDelete}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: app}
`), 0)
	if err != nil {
		t.Fatal(err)
	}
	names := func(objs []*unstructured.Unstructured) (n []string) {
		for _, o := range objs {
			n = append(n, o.GetName())
		}
		return n
	}
	all, err := applied(objs, "")
	if err != nil || strings.Join(names(all), ",") != "migrate,app" {
		t.Fatalf("applied: %v %v", names(all), err)
	}
	pre, err := applied(objs, phases.Pre)
	if err != nil || strings.Join(names(pre), ",") != "migrate" {
		t.Fatalf("applied in pre: %v %v", names(pre), err)
	}
}
