package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// The flux kcl verbs through the real flux CLI (bin/flux-cli/flux, `make fluxcli`) against this
// suite's controllers. test/fluxplugin covers the plugin protocol and what needs no controller.

// fluxKCLSecret is an argument value of the KCLArtifact: no verb may print it.
const fluxKCLSecret = "s3cr3t-greeting"

var fluxKCLPlugin struct {
	once sync.Once
	dir  string
	err  error
}

// pluginDir builds flux-kcl (static, as flux is) once into a directory used as $FLUXCD_PLUGINS.
func pluginDir(t *testing.T) string {
	t.Helper()
	p := &fluxKCLPlugin
	p.once.Do(func() {
		p.dir, p.err = os.MkdirTemp("", "e2e-fluxkcl-")
		if p.err != nil {
			return
		}
		p.err = fluxenv.BuildPlugin(suite.repo, p.dir, "")
	})
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.dir
}

type fluxResult struct {
	stdout, stderr string
	code           int
}

// fluxKCL runs `flux <args>` with the plugin, the suite's admin kubeconfig and a HOME of its
// own. The e2e suite never skips: a missing flux binary fails.
func fluxKCL(t *testing.T, args ...string) fluxResult {
	t.Helper()
	bin := filepath.Join(suite.repo, "bin", "flux-cli", "flux")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing (make fluxcli): %v", bin, err)
	}
	r := fluxenv.RunFlux(t, bin, pluginDir(t), suite.env.KubeconfigPath, fluxKCLSecret, args...)
	return fluxResult{stdout: r.Stdout, stderr: r.Stderr, code: r.Code}
}

// expectOK asserts exit 0 and that stderr holds each line of want, in order.
func expectOK(t *testing.T, r fluxResult, want ...string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	rest := r.stderr
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Fatalf("stderr lacks %q (in order) in:\n%s", w, r.stderr)
		}
		rest = rest[i+len(w):]
	}
}

// TestFluxKCL follows one KCLArtifact through the verbs. Its GitRepository and KCLArtifact poll
// every 10 minutes, so that what moves them within the test is flux kcl reconcile.
func TestFluxKCL(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "fluxkcl")
	rev1 := gitRevision(createRepo(t, ns, program{version: "1"}.files()))
	createSlowSources(t, ns, map[string]string{"greeting": fluxKCLSecret})
	art1 := waitKCLArtifactReady(t, ns, "app", rev1).Status.Artifact
	waitKustomizationReady(t, ns, "app")

	t.Run("get", func(t *testing.T) { testFluxKCLGet(t, ns) })
	rev2 := ""
	t.Run("reconcile --with-source after a commit", func(t *testing.T) { rev2 = testFluxKCLReconcile(t, ns) })
	if rev2 == "" {
		return
	}
	t.Run("tree", func(t *testing.T) {
		r := fluxKCL(t, "kcl", "tree", "app", "-n", ns)
		want := fmt.Sprintf("GitRepository/%[1]s/app\n└── KCLArtifact/%[1]s/app\n    └── ExternalArtifact/%[1]s/app\n"+
			"        └── Kustomization/%[1]s/app\n            └── ConfigMap/%[1]s/app-config\n", ns)
		if r.code != 0 || r.stdout != want {
			t.Errorf("tree: exit %d, stdout:\n%s\nwant:\n%s", r.code, r.stdout, want)
		}
	})
	t.Run("events", func(t *testing.T) {
		r := fluxKCL(t, "kcl", "events", "app", "-n", ns)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "LAST SEEN") || !strings.Contains(r.stdout, "KCLArtifact/app") ||
			!strings.Contains(r.stdout, "Kustomization/app") {
			t.Errorf("events: exit %d; want the KCLArtifact's and the Kustomization's events", r.code)
		}
	})
	t.Run("diff", func(t *testing.T) { testFluxKCLDiff(t, ns, rev1, rev2) })
	t.Run("build kclartifact prints the served artifact", func(t *testing.T) { testFluxKCLBuild(t, ns) })
	t.Run("history, rollback, unpin", func(t *testing.T) { testFluxKCLRollback(t, ns, art1.Digest, art1.Revision, rev1, rev2) })
	t.Run("suspend and resume", func(t *testing.T) { testFluxKCLSuspend(t, ns) })
	t.Run("completion", func(t *testing.T) {
		r := fluxKCL(t, "__complete", "-n", ns, "kcl", "reconcile", "")
		if r.code != 0 || r.stdout != "app\n:4\n" {
			t.Errorf("flux __complete -n %s kcl reconcile \"\": %q", ns, r.stdout)
		}
	})
}

// createSlowSources creates GitRepository app of repository ns and KCLArtifact app of it, both
// polling every 10 minutes.
func createSlowSources(t *testing.T, ns string, args map[string]string) {
	t.Helper()
	create(t, &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: sourcev1.GitRepositorySpec{URL: suite.env.Git.URL(ns), Interval: metav1.Duration{Duration: 10 * time.Minute},
			Timeout: &metav1.Duration{Duration: 30 * time.Second}, Reference: &sourcev1.GitRepositoryRef{Branch: fluxenv.DefaultBranch}},
	})
	art := newKCLArtifact(ns, "app", "app", args)
	art.Spec.Interval = metav1.Duration{Duration: 10 * time.Minute}
	create(t, art)
}

// TestFluxKCLPhases: reconcile requests the Kustomization of each deploy phase in order, and
// tree shows them with their phase and objects.
func TestFluxKCLPhases(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "fluxkclph")
	createRepo(t, ns, map[string]string{"main.k": fmt.Sprintf(phasesProgram, "1")})
	createSlowSources(t, ns, nil)
	rev2 := commit(t, ns, "v2", map[string]string{"main.k": fmt.Sprintf(phasesProgram, "2")})
	r := fluxKCL(t, "kcl", "reconcile", "app", "-n", ns, "--with-source")
	expectOK(t, r, "✔ fetched revision "+rev2, "✔ rendered revision ",
		"► annotating Kustomization app-pre in", "✔ applied revision ", "(origin "+rev2+")\n",
		"► annotating Kustomization app in", "✔ applied revision ", "(origin "+rev2+")\n",
		"► annotating Kustomization app-post in", "✔ applied revision ", "(origin "+rev2+")\n")
	for _, name := range []string{"pre", "main", "post"} {
		expectConfigMap(t, ns, name, map[string]string{"version": "2"})
	}
	r = fluxKCL(t, "kcl", "tree", "app", "-n", ns)
	want := fmt.Sprintf(`GitRepository/%[1]s/app
└── KCLArtifact/%[1]s/app
    └── ExternalArtifact/%[1]s/app
        ├── Kustomization/%[1]s/app-pre (phase pre)
        │   └── ConfigMap/%[1]s/pre
        ├── Kustomization/%[1]s/app (phase main)
        │   └── ConfigMap/%[1]s/main
        └── Kustomization/%[1]s/app-post (phase post)
            └── ConfigMap/%[1]s/post
`, ns)
	if r.code != 0 || r.stdout != want {
		t.Errorf("tree: exit %d, stdout:\n%s\nwant:\n%s", r.code, r.stdout, want)
	}
}

// waitKustomizationReady waits for the KCLArtifact's KustomizationReady=True: what APPLIED shows.
func waitKustomizationReady(t *testing.T, ns, name string) {
	t.Helper()
	obj := &kclv1.KCLArtifact{}
	waitFor(t, ns, "KCLArtifact "+ns+"/"+name+" KustomizationReady=True", func(ctx context.Context) (bool, string, error) {
		if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return false, "", err
		}
		c := apimeta.FindStatusCondition(obj.Status.Conditions, kclv1.KustomizationReadyCondition)
		return c != nil && c.Status == metav1.ConditionTrue, kclArtifactState(obj), nil
	})
}

func testFluxKCLGet(t *testing.T, ns string) {
	r := fluxKCL(t, "kcl", "get", "-A")
	var cells []string
	for _, l := range strings.Split(r.stdout, "\n") {
		c := strings.Split(l, "\t")
		for i := range c {
			c[i] = strings.TrimSpace(c[i])
		}
		if c[0] == ns {
			cells = c
		}
	}
	// NAMESPACE NAME REVISION SUSPENDED READY APPLIED PHASE ROLLBACK MESSAGE
	if r.code != 0 || len(cells) != 9 || cells[1] != "app" || cells[2] == "" ||
		cells[3] != "False" || cells[4] != "True" || cells[5] != "True" || cells[7] != "-" {
		t.Errorf("get -A: exit %d, row of %s: %q", r.code, ns, cells)
	}
	r = fluxKCL(t, "kcl", "get", "nope", "-n", ns)
	if r.code != 1 || r.stderr != fmt.Sprintf("✗ KCLArtifact object 'nope' not found in %s namespace\n", ns) {
		t.Errorf("get nope: exit %d, stderr %q", r.code, r.stderr)
	}
}

// testFluxKCLReconcile commits, runs reconcile --with-source and returns the commit's revision.
// It logs the time from the commit to the applied revision.
func testFluxKCLReconcile(t *testing.T, ns string) string {
	start := time.Now()
	rev2 := commit(t, ns, "version 2", program{version: "2"}.files())
	committed := time.Since(start)
	r := fluxKCL(t, "kcl", "reconcile", "app", "-n", ns, "--with-source")
	total := time.Since(start)
	expectOK(t, r, "► annotating GitRepository app in "+ns+" namespace\n", "✔ fetched revision "+rev2+"\n",
		"► annotating KCLArtifact app", "✔ rendered revision ", " from "+rev2+"\n",
		"► annotating Kustomization app", "✔ applied revision ", "(origin "+rev2+")\n")
	expectConfigMap(t, ns, "app-config", map[string]string{"env": "dev", "greeting": fluxKCLSecret, "version": "2"})
	t.Logf("FIGURE flux kcl reconcile --with-source: commit -> applied %s (commit %s, flux kcl reconcile %s)",
		total.Round(time.Millisecond), committed.Round(time.Millisecond), (total - committed).Round(time.Millisecond))
	return rev2
}

func testFluxKCLRollback(t *testing.T, ns, digest1, artRev1, rev1, rev2 string) {
	r := fluxKCL(t, "kcl", "history", "app", "-n", ns)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 3 || !strings.Contains(lines[1], truncHex(rev2)) || !strings.HasSuffix(lines[1], "current") ||
		!strings.HasPrefix(lines[2], digest1) || !strings.Contains(lines[2], "Healthy") {
		t.Fatalf("history: exit %d, want the current artifact of %s and the healthy one of %s (%s)", r.code, rev2, rev1, digest1)
	}
	r = fluxKCL(t, "kcl", "rollback", "app", "-n", ns)
	expectOK(t, r, "✔ KCLArtifact app pinned to "+digest1, "⚠️ this changed the cluster only", "✔ published revision "+artRev1+"\n",
		"► annotating Kustomization app", "✔ applied revision "+artRev1+" (origin "+rev1+")")
	if want := fmt.Sprintf("# KCLArtifact %s/app\nspec:\n  pinnedDigest: %s\n", ns, digest1); r.stdout != want {
		t.Errorf("rollback stdout %q, want %q", r.stdout, want)
	}
	expectConfigMap(t, ns, "app-config", map[string]string{"env": "dev", "greeting": fluxKCLSecret, "version": "1"})

	oneFail := fluxKCL(t, "kcl", "pin", "app", "sha256:00000000", "-n", ns)
	if oneFail.code != 1 || strings.Count(oneFail.stderr, "\n") != 1 || !strings.HasPrefix(oneFail.stderr, "✗ digest sha256:00000000 not found") {
		t.Errorf("pin of an unknown digest: exit %d, stderr %q", oneFail.code, oneFail.stderr)
	}
	expectOK(t, fluxKCL(t, "kcl", "unpin", "app", "-n", ns), "✔ KCLArtifact app unpinned", "✔ applied revision ", "(origin "+rev2+")")
	expectConfigMap(t, ns, "app-config", map[string]string{"env": "dev", "greeting": fluxKCLSecret, "version": "2"})
}

// testFluxKCLDiff: the artifact server's diff between the artifacts of rev1 and rev2. The suite's
// controller runs outside the cluster, so the plugin reaches it at the artifact URL (test/node
// covers the port-forward to a Pod).
func testFluxKCLDiff(t *testing.T, ns, rev1, rev2 string) {
	bin := filepath.Join(suite.repo, "bin", "flux-cli", "flux")
	// a diff shows rendered objects, here a ConfigMap holding the inline argument's value: the
	// plugin prints what it is asked for, so the check for printed argument values is off
	r := fluxenv.RunFlux(t, bin, pluginDir(t), suite.env.KubeconfigPath, "\x00", "kcl", "diff", "app", "-n", ns)
	for _, want := range []string{"# " + ns + "/app: main@sha256:", "(" + rev1 + ") -> main@sha256:", "(" + rev2 + ")\n",
		"1 changed", "-  version: \"1\"\n", "+  version: \"2\"\n"} {
		if r.Code != 0 || !strings.Contains(r.Stdout, want) {
			t.Errorf("diff: exit %d, stdout lacks %q", r.Code, want)
		}
	}
	if r.Stderr != "" {
		t.Errorf("diff: stderr %q, want none (no port-forward outside the cluster)", r.Stderr)
	}
	oneFail := fluxKCL(t, "kcl", "diff", "app", "-n", ns, "--to", "sha256:00000000")
	if oneFail.code != 1 || oneFail.stderr != "✗ digest sha256:00000000 not found in the history of KCLArtifact app (flux kcl history app)\n" {
		t.Errorf("diff --to an unknown digest: exit %d, stderr %q", oneFail.code, oneFail.stderr)
	}
}

// testFluxKCLBuild: build kclartifact from a local checkout of the commit the controller rendered
// prints exactly the YAML of the artifact it serves, through the same render binary and sandbox.
func testFluxKCLBuild(t *testing.T, ns string) {
	obj := &kclv1.KCLArtifact{}
	if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "app"}, obj); err != nil {
		t.Fatal(err)
	}
	files := expectArtifactServed(t, obj.Status.Artifact)
	if !strings.Contains(files["manifests.yaml"], `version: "2"`) {
		t.Fatalf("the served artifact is not version 2's: files %v", slices.Sorted(maps.Keys(files)))
	}
	checkout := t.TempDir()
	for name, content := range (program{version: "2"}).files() {
		if err := os.WriteFile(filepath.Join(checkout, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(suite.repo, "bin", "flux-cli", "flux")
	env := []string{"KCL_ARTIFACT_CONTROLLER=" + os.Getenv("KCL_BINARY"), "KCL_LIB=" + os.Getenv("KCL_LIB")}
	r := fluxenv.RunFluxIn(t, bin, pluginDir(t), suite.env.KubeconfigPath, checkout, env,
		"kcl", "build", "kclartifact", "app", "-n", ns, "--path", ".")
	if r.Code != 0 || r.Stdout != files["manifests.yaml"] {
		t.Errorf("build kclartifact: exit %d, stdout:\n%s\nwant the served artifact's manifests.yaml (files %v):\n%s",
			r.Code, r.Stdout, slices.Sorted(maps.Keys(files)), files["manifests.yaml"])
	}
}

func truncHex(rev string) string {
	i := strings.LastIndex(rev, ":")
	return rev[:i+9]
}

func testFluxKCLSuspend(t *testing.T, ns string) {
	// the Kustomization through the template first: a suspend written on it would be put back
	expectOK(t, fluxKCL(t, "kcl", "suspend", "app", "-n", ns, "--kustomizations"),
		"► suspending Kustomization app in "+ns+" namespace\n✔ Kustomization suspended\n",
		"► suspending KCLArtifact app in "+ns+" namespace\n✔ KCLArtifact suspended\n")
	expectSuspended(t, ns, true)
	r := fluxKCL(t, "kcl", "reconcile", "app", "-n", ns)
	if r.code != 1 || r.stderr != fmt.Sprintf("✗ KCLArtifact app in %s namespace is suspended: flux kcl resume app first\n", ns) {
		t.Errorf("reconcile of a suspended KCLArtifact: exit %d, stderr %q", r.code, r.stderr)
	}
	expectOK(t, fluxKCL(t, "kcl", "resume", "app", "-n", ns, "--kustomizations"),
		"✔ KCLArtifact resumed", "✔ Kustomization app resumed (spec.kustomization.suspend)", "✔ KCLArtifact app reconciliation completed",
		"✔ Kustomization app reconciliation completed", "✔ applied revision ")
	expectSuspended(t, ns, false)
}

func expectSuspended(t *testing.T, ns string, want bool) {
	t.Helper()
	obj := &kclv1.KCLArtifact{}
	ks := &kustomizev1.Kustomization{}
	key := client.ObjectKey{Namespace: ns, Name: "app"}
	if err := suite.env.Client.Get(t.Context(), key, obj); err != nil {
		t.Fatal(err)
	}
	if err := suite.env.Client.Get(t.Context(), key, ks); err != nil {
		t.Fatal(err)
	}
	if obj.Spec.Suspend != want || ks.Spec.Suspend != want {
		t.Errorf("suspend: KCLArtifact %v, Kustomization %v; want %v", obj.Spec.Suspend, ks.Spec.Suspend, want)
	}
}
