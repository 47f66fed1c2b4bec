package e2e

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// TestRenderDiffAgreesWithKustomizeController: the real kustomize-controller applies a
// KCLArtifact whose template sets targetNamespace, namePrefix and commonMetadata, with an argument
// from a ConfigMap. render --diff --kclartifact on the unchanged checkout finds nothing to change;
// a one-field change shows that field alone; an object left out is reported as pruned.
func TestRenderDiffAgreesWithKustomizeController(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "diff")
	target := newNamespace(t, "diff-target")
	p := program{version: "1", extra: true}
	rev := gitRevision(createRepo(t, ns, p.files()))
	createGitRepository(t, ns, "app", ns)
	create(t, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kcl-args", Namespace: ns,
			Labels: map[string]string{meta.LabelKeyWatch: meta.LabelValueWatchEnabled}},
		Data: map[string]string{"greeting": "from a ConfigMap"},
	})
	ka := newKCLArtifact(ns, "app", "app", map[string]string{"env": "prod"})
	ka.Spec.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "ConfigMap", Name: "kcl-args"}}
	ka.Spec.Kustomization = &kclv1.KustomizationTemplate{
		TargetNamespace: target, NamePrefix: "p-",
		CommonMetadata: &kustomizev1.CommonMetadata{Labels: map[string]string{"team": "a"},
			Annotations: map[string]string{"owner": "ops"}},
	}
	create(t, ka)
	obj := waitKCLArtifactReady(t, ns, "app", rev)
	waitKustomizationApplied(t, ns, "app", obj.Status.Artifact.Revision)
	waitConfigMap(t, target, "p-app-config", map[string]string{"env": "prod", "greeting": "from a ConfigMap", "version": "1"})

	diff := func(p program) (stdout, stderr string, code int) {
		t.Helper()
		checkout := writeFiles(t, p.files())
		cmd := exec.CommandContext(t.Context(), suite.binary, "render", "--diff", "--kclartifact", ns+"/app",
			"--kubeconfig", suite.env.KubeconfigPath, checkout)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return o.String(), e.String(), cmd.ProcessState.ExitCode()
	}

	out, errOut, code := diff(p)
	if code != 0 || out != "# no changes (2 unchanged)\n" {
		t.Fatalf("unchanged program: exit %d, want 0 and no changes\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	changed := p
	changed.version = "2"
	out, errOut, code = diff(changed)
	if code != 1 {
		t.Fatalf("one field changed: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	id := "ConfigMap/" + target + "/p-app-config"
	mustHave(t, out, "# 0 added, 0 removed, 1 changed, 1 unchanged\n", "--- a/"+id+"\n", "+++ b/"+id+"\n",
		"-  version: \"1\"\n", "+  version: \"2\"\n")
	if n := strings.Count(out, "\n-") + strings.Count(out, "\n+"); n != 4 {
		t.Errorf("want the version line alone changed (2 headers, 2 lines), got %d:\n%s", n, out)
	}

	fewer := p
	fewer.extra = false
	out, errOut, code = diff(fewer)
	if code != 1 {
		t.Fatalf("an object left out: exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	mustHave(t, out, "# 0 added, 1 removed, 0 changed, 1 unchanged\n",
		"--- a/ConfigMap/"+target+"/p-app-extra\n", "+++ /dev/null\n")
}

func mustHave(t *testing.T, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("output does not contain %q:\n%s", p, s)
		}
	}
}

// A KCLArtifact takes a password from a Secret (argumentsFrom); a pull request copies it into a
// ConfigMap's data, a label, an annotation and a Job's command line. The live diff a CI job runs
// (render --diff --kclartifact, unified and Markdown) masks the value wherever it landed;
// --show-secrets shows it. Watched first: the ConfigMap's line printed the password.
func TestRenderDiffMasksValuesFromSecrets(t *testing.T) {
	t.Parallel()
	const password = "TOPSECRET-pw-42"
	ns := newNamespace(t, "diff-secret")
	base := map[string]string{"main.k": `[{apiVersion = "v1", kind = "ConfigMap", metadata = {name = "app", namespace = option("namespace")}, data.v = "1"}]` + "\n"}
	rev := gitRevision(createRepo(t, ns, base))
	createGitRepository(t, ns, "app", ns)
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, StringData: map[string]string{"password": password}})
	ka := newKCLArtifact(ns, "app", "app", nil)
	ka.Spec.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "Secret", Name: "db"}}
	create(t, ka)
	obj := waitKCLArtifactReady(t, ns, "app", rev)
	waitKustomizationApplied(t, ns, "app", obj.Status.Artifact.Revision)

	pr := writeFiles(t, map[string]string{"main.k": `_p = option("password")
_ns = option("namespace")
_cm = {
    apiVersion = "v1"
    kind = "ConfigMap"
    metadata = {name = "app", namespace = _ns, labels = {copied = _p}, annotations = {copied = "pw: " + _p}}
    data = {v = "1", x = _p}
}
_job = {
    apiVersion = "batch/v1"
    kind = "Job"
    metadata = {name = "leak", namespace = _ns}
    spec.template.spec = {restartPolicy = "Never", containers = [{name = "c", image = "busybox", command = ["sh", "-c", "echo --password=" + _p]}]}
}
items = [_cm, _job]
`})
	diff := func(extra ...string) string {
		t.Helper()
		args := append([]string{"render", "--diff", "--kclartifact", ns + "/app", "--kubeconfig", suite.env.KubeconfigPath, pr}, extra...)
		cmd := exec.CommandContext(t.Context(), suite.binary, args...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		_ = cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 1 {
			t.Fatalf("render %v: exit %d, want 1 (differences)\nstdout:\n%s\nstderr:\n%s", extra, code, o.String(), e.String())
		}
		return o.String() + e.String()
	}
	for _, format := range [][]string{nil, {"-o", "markdown"}} {
		if out := diff(format...); strings.Contains(out, password) || !strings.Contains(out, "***") {
			t.Errorf("render --diff %v shows the password, or no mask:\n%s", format, out)
		}
	}
	if out := diff("--show-secrets"); !strings.Contains(out, "x: "+password) {
		t.Errorf("--show-secrets does not show the value:\n%s", out)
	}
}
