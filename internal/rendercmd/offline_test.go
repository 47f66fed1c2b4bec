package rendercmd

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

// appProgram renders a Deployment, a ConfigMap and a Secret, none with a namespace: the
// KCLArtifact's template gives them one, a prefix and common labels.
const appProgram = `replicas = option("replicas") or 1
items = [
    {apiVersion = "apps/v1", kind = "Deployment", metadata.name = "web", spec = {
        replicas = replicas
        selector.matchLabels.app = "web"
        template = {metadata.labels.app = "web", spec.containers = [{name = "web", image = "nginx:1.27"}]}
    }}
    {apiVersion = "v1", kind = "ConfigMap", metadata.name = "settings", data.greeting = option("greeting") or "hello"}
    {apiVersion = "v1", kind = "Secret", metadata.name = "creds", stringData.password = "VERSION-PASSWORD"}
]
`

const appKCLArtifact = `apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: repo, namespace: apps}
spec: {url: "https://example.invalid/repo", interval: 5m}
---
apiVersion: kcl.contrib.fluxcd.io/v1alpha1
kind: KCLArtifact
metadata: {name: app, namespace: apps}
spec:
  interval: 5m
  sourceRef: {kind: GitRepository, name: repo}
  path: ./apps/app
  arguments: {greeting: ARG-GREETING}
  kustomization:
    targetNamespace: prod
    namePrefix: team-
    commonMetadata: {labels: {team: a}}
`

// gitRepo is a Git repository in a temporary directory, committed to with the git binary.
type gitRepo struct{ dir string }

func newGitRepo(t *testing.T) *gitRepo {
	t.Helper()
	r := &gitRepo{dir: t.TempDir()}
	r.git(t, "init", "-q", "-b", "main")
	return r
}

func (r *gitRepo) git(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.invalid"}, args...)...)
	cmd.Dir = r.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (r *gitRepo) commit(t *testing.T, message string, files map[string]string) {
	t.Helper()
	kclmodtest.WriteFiles(t, r.dir, files)
	r.git(t, "add", "-A")
	r.git(t, "commit", "-q", "-m", message)
}

// pullRequest is a repository with the KCLArtifact's program at main~1 and a change on main:
// the Deployment's replicas from 1 to 2, password and greeting unchanged.
func pullRequest(t *testing.T) *gitRepo {
	t.Helper()
	r := newGitRepo(t)
	r.commit(t, "base", map[string]string{"apps/app/main.k": appProgram, "clusters/app.yaml": appKCLArtifact})
	r.commit(t, "two replicas", map[string]string{
		"apps/app/main.k": strings.Replace(appProgram, `or 1`, `or 2`, 1)})
	return r
}

func TestDiffFromGitRevision(t *testing.T) {
	r := pullRequest(t)
	out, errOut, code := runRender(t, r.dir, "--diff-from", "main~1", "--kclartifact-file", "clusters/app.yaml")
	if code != 1 {
		t.Fatalf("code %d, want 1; out %q err %q", code, out, errOut)
	}
	// the template's transformations apply on both sides: names, namespace and labels agree
	mustContain(t, "stdout", out, "# 0 added, 0 removed, 1 changed, 2 unchanged\n",
		"--- a/Deployment/prod/team-web\n", "+++ b/Deployment/prod/team-web\n", "-  replicas: 1\n", "+  replicas: 2\n")
	if n := strings.Count(out, "\n-") + strings.Count(out, "\n+"); n != 4 {
		t.Errorf("want only the replicas line changed (2 headers, 2 lines), got %d:\n%s", n, out)
	}
	mustNotContain(t, "output", out+errOut, "VERSION-PASSWORD")

	out, errOut, code = runRender(t, r.dir, "--diff-from", "main", "--kclartifact-file", "clusters/app.yaml")
	if code != 0 || out != "# no changes (3 unchanged)\n" {
		t.Fatalf("the same revision: code %d out %q err %q", code, out, errOut)
	}
}

func TestDiffFromSubdirectoryAndDirectory(t *testing.T) {
	r := pullRequest(t)
	// from a subdirectory, paths are relative to it on both sides
	sub := filepath.Join(r.dir, "clusters")
	out, errOut, code := runRender(t, sub, "--diff-from", "main~1", "--kclartifact-file", "app.yaml", "..")
	if code != 1 || !strings.Contains(out, "+  replicas: 2\n") {
		t.Fatalf("from clusters/: code %d out %q err %q", code, out, errOut)
	}
	// a directory stands for the current one
	old := t.TempDir()
	kclmodtest.WriteFiles(t, old, map[string]string{"apps/app/main.k": appProgram, "clusters/app.yaml": appKCLArtifact})
	out, errOut, code = runRender(t, r.dir, "--diff-from", old, "--kclartifact-file", "clusters/app.yaml")
	if code != 1 || !strings.Contains(out, "+  replicas: 2\n") {
		t.Fatalf("from a directory: code %d out %q err %q", code, out, errOut)
	}
}

func TestDiffFromNewKCLArtifactAddsAll(t *testing.T) {
	r := newGitRepo(t)
	r.commit(t, "empty", map[string]string{"README": "x\n"})
	r.commit(t, "app", map[string]string{"apps/app/main.k": appProgram, "clusters/app.yaml": appKCLArtifact})
	out, errOut, code := runRender(t, r.dir, "--diff-from", "main~1", "--kclartifact-file", "clusters/app.yaml")
	if code != 1 {
		t.Fatalf("code %d out %q err %q", code, out, errOut)
	}
	mustContain(t, "stdout", out, "# 3 added, 0 removed, 0 changed, 0 unchanged\n", "+++ b/Secret/prod/team-creds\n")
}

func TestDiffFromErrors(t *testing.T) {
	r := pullRequest(t)
	for name, args := range map[string][]string{
		"unknown revision":    {"--diff-from", "no-such-rev", "--kclartifact-file", "clusters/app.yaml"},
		"cluster KCLArtifact": {"--diff-from", "main~1", "--kclartifact", "apps/app"},
		"both diffs":          {"--diff-from", "main~1", "--diff", "--kclartifact-file", "clusters/app.yaml"},
		"a spec flag":         {"--diff-from", "main~1", "--kclartifact-file", "clusters/app.yaml", "-S", "x"},
		"broken program":      {"--diff-from", "main~1", "--kclartifact-file", "clusters/broken.yaml"},
	} {
		t.Run(name, func(t *testing.T) {
			if name == "broken program" {
				kclmodtest.WriteFiles(t, r.dir, map[string]string{"clusters/broken.yaml": strings.Replace(
					appKCLArtifact, "./apps/app", "./apps/missing", 1)})
			}
			out, errOut, code := runRender(t, r.dir, args...)
			if code != 2 || out != "" || !strings.HasPrefix(errOut, "Error: ") {
				t.Fatalf("code %d out %q err %q, want exit 2 and an error", code, out, errOut)
			}
		})
	}
}

// TestDiffMarkdownGolden is the pull-request comment: go test -run Markdown -update rewrites it.
func TestDiffMarkdownGolden(t *testing.T) {
	r := newGitRepo(t)
	r.commit(t, "base", map[string]string{"apps/app/main.k": appProgram, "clusters/app.yaml": appKCLArtifact})
	changed := strings.NewReplacer(`or 1`, `or 3`, "VERSION-PASSWORD", "NEW-PASSWORD",
		`{apiVersion = "v1", kind = "ConfigMap"`, `{apiVersion = "v1", kind = "ConfigMap", metadata.annotations = {"kcl.contrib.fluxcd.io/phase" = "pre"}`,
	).Replace(appProgram)
	changed = strings.Replace(changed, "]\n", `    {apiVersion = "v1", kind = "ServiceAccount", metadata.name = "web"}
]
`, 1)
	r.commit(t, "change", map[string]string{"apps/app/main.k": changed})
	out, errOut, code := runRender(t, r.dir, "--diff-from", "main~1", "--kclartifact-file", "clusters/app.yaml", "-o", "markdown")
	if code != 1 {
		t.Fatalf("code %d out %q err %q", code, out, errOut)
	}
	mustNotContain(t, "markdown", out, "VERSION-PASSWORD", "NEW-PASSWORD")
	golden := filepath.Join("testdata", "diff.md.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out != string(want) {
		t.Errorf("markdown differs from %s (go test -run Markdown -update rewrites it):\n%s", golden, out)
	}
}

// TestDiffFromKCLArtifactStaysInTheCheckout: the KCLArtifact file comes with the pull request,
// so its author chooses spec.path and entries. Neither may reach a file beside the checkout.
func TestDiffFromKCLArtifactStaysInTheCheckout(t *testing.T) {
	parent := t.TempDir()
	kclmodtest.WriteFiles(t, parent, map[string]string{"outside/main.k": `items = [{apiVersion = "v1", kind = "ConfigMap", metadata.name = "leak", data.v = "TOP-SECRET"}]` + "\n"})
	repo := filepath.Join(parent, "repo")
	r := &gitRepo{dir: repo}
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	r.git(t, "init", "-q", "-b", "main")
	r.commit(t, "base", map[string]string{"apps/app/main.k": appProgram, "clusters/app.yaml": appKCLArtifact})
	for name, kclArtifact := range map[string]string{
		"spec.path": strings.Replace(appKCLArtifact, "./apps/app", "../outside", 1),
		"entries":   strings.Replace(appKCLArtifact, "  path: ./apps/app\n", "  path: .\n  entries: [../outside/main.k]\n", 1),
	} {
		t.Run(name, func(t *testing.T) {
			kclmodtest.WriteFiles(t, repo, map[string]string{"clusters/hostile.yaml": kclArtifact})
			out, errOut, code := runRender(t, repo, "--diff-from", "main", "--kclartifact-file", "clusters/hostile.yaml")
			if code != 2 || strings.Contains(out+errOut, "TOP-SECRET") {
				t.Fatalf("code %d, want 2 and nothing from outside the checkout; out %q err %q", code, out, errOut)
			}
		})
	}
}

// A manifest without metadata.namespace takes the one --kclartifact names on both sides of an
// offline diff, as render and --diff do (before, the other side looked in "default" and failed).
func TestDiffFromTakesTheNamespaceOfKCLArtifact(t *testing.T) {
	unnamespaced := strings.Replace(appKCLArtifact, "metadata: {name: app, namespace: apps}", "metadata: {name: app}", 1)
	r := newGitRepo(t)
	r.commit(t, "base", map[string]string{"apps/app/main.k": appProgram, "clusters/app.yaml": unnamespaced})
	r.commit(t, "two replicas", map[string]string{"apps/app/main.k": strings.Replace(appProgram, `or 1`, `or 2`, 1)})
	out, errOut, code := runRender(t, r.dir, "--diff-from", "main~1", "--kclartifact-file", "clusters/app.yaml", "--kclartifact", "apps/app")
	if code != 1 {
		t.Fatalf("code %d, want 1 (differences); out %q err %q", code, out, errOut)
	}
	mustContain(t, "stdout", out, "-  replicas: 1\n", "+  replicas: 2\n")
}
