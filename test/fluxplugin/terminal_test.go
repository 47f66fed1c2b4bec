package fluxplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
	"github.com/kcl-flux/kcl-artifact-controller/test/kclapp"
)

// What a tenant writes in its namespace, printed to the operator's terminal: every field below
// is one a tenant with cluster-admin in its namespace can write (status subresources included),
// or one the controller copies from such a field (a source revision becomes the artifact's
// revision, the Ready message and the history's source revision). Printed raw, it clears the
// screen, sets the window title, plants a hyperlink, turns text around (U+202E) and forges a
// table row with a line feed and tabs.
const hostile = "\x1b[2J\x1b]0;pwned\x07\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07\u009b31m\u202egnp.exe" +
	"\nforged\tTrue\tTrue\tReady\t-\tall good"

// hostileName is hostile where a Kubernetes name must be a name only to kustomize-controller:
// an inventory id splits at "_".
const hostileName = "x\x1b]0;pwned\x07\u009b\u202egnp\nforged"

// rawControls are what must never reach a terminal raw: ESC, BEL, C1 controls, U+202E.
func rawControls(s string) []string {
	var found []string
	for _, r := range s {
		if r == 0x1b || r == 0x07 || (r >= 0x80 && r <= 0x9f) || r == 0x202e {
			found = append(found, fmt.Sprintf("%U", r))
		}
	}
	return found
}

// assertInert fails when stdout or stderr holds a raw control, and when stdout has other than
// lines lines (a table's header and rows).
func assertInert(t *testing.T, what string, r result, lines int) {
	t.Helper()
	if c := rawControls(r.stdout); len(c) > 0 {
		t.Errorf("%s: stdout holds %s raw", what, strings.Join(c, " "))
	}
	if c := rawControls(r.stderr); len(c) > 0 {
		t.Errorf("%s: stderr holds %s raw", what, strings.Join(c, " "))
	}
	if got := strings.Count(r.stdout, "\n"); lines > 0 && got != lines {
		t.Errorf("%s: %d lines, want %d (a forged row?)", what, got, lines)
	}
}

func TestTenantTextIsInertOnTheTerminal(t *testing.T) {
	fluxBinary(t)
	cfg, kc := startClusterConfig(t)
	tb, err := fluxenv.LoadTestBin()
	if err != nil {
		t.Fatal(err)
	}
	installCRDs(t, cfg, tb.FluxCRDsDir)
	c := newClient(t, cfg)
	createHostileTenant(t, c)

	t.Run("get", func(t *testing.T) {
		r := flux(t, kc, "kcl", "get", "-n", "tenant")
		assertInert(t, "get", r, 2)
		r = flux(t, kc, "kcl", "get", "-A")
		assertInert(t, "get -A", r, 2)
	})
	t.Run("history", func(t *testing.T) {
		assertInert(t, "history", flux(t, kc, "kcl", "history", "app", "-n", "tenant"), 3)
		// the data outputs keep the value exactly
		r := flux(t, kc, "kcl", "history", "app", "-n", "tenant", "-o", "json")
		var h []kclv1.ArtifactHistoryEntry
		if err := json.Unmarshal([]byte(r.stdout), &h); err != nil || len(h) != 2 || h[0].SourceRevision != hostile || h[1].Digest != hostileDigest {
			t.Errorf("history -o json does not keep the values exactly: %v, %+v", err, h)
		}
		r = flux(t, kc, "kcl", "history", "app", "-n", "tenant", "-o", "yaml")
		h = nil
		if err := yaml.Unmarshal([]byte(r.stdout), &h); err != nil || len(h) != 2 || h[0].SourceRevision != hostile {
			t.Errorf("history -o yaml does not keep the value exactly: %v, %+v", err, h)
		}
	})
	t.Run("tree", func(t *testing.T) {
		// the source, the KCLArtifact, its ExternalArtifact, its Kustomization and 2 objects
		assertInert(t, "tree", flux(t, kc, "kcl", "tree", "app", "-n", "tenant"), 6)
		r := flux(t, kc, "kcl", "tree", "app", "-n", "tenant", "-o", "json")
		if !strings.Contains(r.stdout, mustJSON(t, "ExternalArtifact/tenant/"+hostileName)) ||
			!strings.Contains(r.stdout, mustJSON(t, "ConfigMap/tenant/"+hostileName)) {
			t.Errorf("tree -o json does not keep the names exactly:\n%s", r.stdout)
		}
	})
	t.Run("events", func(t *testing.T) {
		assertInert(t, "events", flux(t, kc, "kcl", "events", "app", "-n", "tenant"), 2)
		assertInert(t, "events --watch", flux(t, kc, "kcl", "events", "app", "-n", "tenant", "--watch", "--timeout", "2s"), 2)
	})
	t.Run("progress and errors", func(t *testing.T) {
		// rollback names the entry it pins, a digest and a source revision the tenant wrote
		r := flux(t, kc, "kcl", "rollback", "app", "-n", "tenant", "--timeout", "1s")
		assertInert(t, "rollback", r, 0)
		for _, line := range strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n") {
			if !strings.HasPrefix(line, "► ") && !strings.HasPrefix(line, "✗ ") && !strings.HasPrefix(line, "✔ ") {
				t.Errorf("rollback: a line of stderr is not one of flux's: %q", line)
			}
		}
		if !strings.Contains(r.stderr, "gnp.exe") {
			t.Errorf("rollback: stderr does not name the entry: %q", r.stderr)
		}
	})
	t.Run("promotion", func(t *testing.T) {
		createHostileStage(t, c)
		assertInert(t, "get with a stage", flux(t, kc, "kcl", "get", "-n", "tenant"), 3)
		// app, the stage, its waiting artifact
		assertInert(t, "tree --stages", flux(t, kc, "kcl", "tree", "--stages", "-n", "tenant"), 3)
		assertInert(t, "history of a stage", flux(t, kc, "kcl", "history", "stage", "-n", "tenant"), 2)
		r := flux(t, kc, "kcl", "approve", "stage", "-n", "tenant")
		assertInert(t, "approve", r, 6)
		if r.code != 0 || !strings.Contains(r.stderr, "gnp.exe") {
			t.Errorf("approve: exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

// createHostileStage creates stage, which follows app, with a status a tenant wrote: a waiting
// artifact, its inputs and gates, and a history entry's promotion record.
func createHostileStage(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	stage := &kclv1.KCLArtifact{
		ObjectMeta: metav1.ObjectMeta{Name: "stage", Namespace: "tenant"},
		Spec: kclv1.KCLArtifactSpec{SourceRef: kclv1.SourceReference{Kind: "ExternalArtifact", Name: "upstream"},
			Interval: metav1.Duration{Duration: time.Minute}, Promotion: &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "app"}}},
	}
	if err := c.Create(ctx, stage); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	inputs := []kclv1.InputValue{{Name: "web.tag" + hostile, Value: hostile, From: "ImagePolicy/web"}}
	stage.Status = kclv1.KCLArtifactStatus{
		History: []kclv1.ArtifactHistoryEntry{{Digest: digestA, Revision: hostile, SourceRevision: hostile, LastPublished: now,
			Inputs: inputs, Promotion: &kclv1.PromotionRecord{Upstream: hostile, UpstreamRevision: hostile, ApprovedBy: hostile}}},
		Promotion: &kclv1.PromotionStatus{Upstream: "app", Waiting: []kclv1.WaitingArtifact{{Digest: hostileDigest, Revision: hostile,
			SourceRevision: hostile, URL: hostile, InputDigest: hostile, RenderedAt: now, Inputs: inputs,
			Gates: []kclv1.GateStatus{{Name: hostile, Message: hostile}, {Name: kclv1.GateApproval, Message: hostile}}}}},
		Conditions: []metav1.Condition{{Type: kclv1.PromotedCondition, Status: "False", Reason: "WaitingForApproval", Message: hostile, LastTransitionTime: now}},
	}
	if err := c.Status().Update(ctx, stage); err != nil {
		t.Fatal(err)
	}
}

const hostileDigest = "sha256:12345678" + hostile

// createHostileTenant creates namespace tenant with KCLArtifact app, whose status a tenant wrote,
// its Kustomization with a written inventory, and an Event of its own about app.
func createHostileTenant(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}); err != nil {
		t.Fatal(err)
	}
	app := &kclv1.KCLArtifact{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "tenant"},
		Spec: kclv1.KCLArtifactSpec{SourceRef: kclv1.SourceReference{Kind: "ExternalArtifact", Name: "upstream"},
			Interval: metav1.Duration{Duration: time.Minute}},
	}
	if err := c.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	app.Status = kclv1.KCLArtifactStatus{
		Artifact: &meta.Artifact{Path: "p.tar.gz", URL: "http://x/p.tar.gz", Revision: hostile, Digest: digestA, LastUpdateTime: now},
		Phase:    "Ready\nforged",
		History: []kclv1.ArtifactHistoryEntry{
			{Digest: digestA, Revision: hostile, SourceRevision: hostile, Health: hostile, LastPublished: now},
			{Digest: hostileDigest, Revision: hostile, SourceRevision: hostile, Health: kclv1.HealthHealthy, LastPublished: now},
		},
		Conditions: []metav1.Condition{
			{Type: "Ready", Status: "True", Reason: "Succeeded", Message: "stored artifact for revision " + hostile, LastTransitionTime: now},
		},
		ExternalArtifactRef: &meta.NamespacedObjectReference{Name: hostileName},
		KustomizationRef:    &meta.NamespacedObjectReference{Name: "app"},
	}
	if err := c.Status().Update(ctx, app); err != nil {
		t.Fatal(err)
	}
	ks := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": "app", "namespace": "tenant"},
		"spec": map[string]any{"interval": "1m", "prune": true,
			"sourceRef": map[string]any{"kind": "ExternalArtifact", "name": "app"}},
	}}
	if err := c.Create(ctx, ks); err != nil {
		t.Fatal(err)
	}
	ks.Object["status"] = map[string]any{"inventory": map[string]any{"entries": []any{
		map[string]any{"id": "tenant_" + hostileName + "__ConfigMap", "v": "v1"},
		map[string]any{"id": "tenant_app_apps_Deployment" + hostile, "v": "v1"},
	}}}
	if err := c.Status().Update(ctx, ks); err != nil {
		t.Fatal(err)
	}
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "forged", Namespace: "tenant"},
		InvolvedObject: corev1.ObjectReference{Kind: "KCLArtifact", Namespace: "tenant", Name: "app"},
		Reason:         "Succeeded", Message: hostile, Type: "Normal\u202e", Count: 1,
		FirstTimestamp: now, LastTimestamp: now,
	}
	if err := c.Create(ctx, e); err != nil {
		t.Fatal(err)
	}
}

func mustJSON(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hostileProgram prints the tenant's text while it renders, as a program under review can.
var hostileProgram = strings.Replace(kclapp.Program, `print("rendering")`,
	`print("rendering\x1b]0;pwned\x07\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07\u009b31m\u202egnp.exe\r\x1b[2K")`, 1)

// build and diff kclartifact pass the render's stderr on: what the program prints and the
// engine's errors, which quote the program.
func TestRenderTextIsInertOnTheTerminal(t *testing.T) {
	f := newBuildFixture(t)
	writeFile(t, filepath.Join(f.checkout, kclapp.ProgramPath), hostileProgram)

	r := f.flux(t, "kcl", "build", "kclartifact", "app", "-n", "apps", "--path", ".")
	assertInert(t, "build", r, 0)
	if r.code != 0 || r.stdout != kclapp.Published("hello", "2", secretValue) || !strings.HasPrefix(r.stderr, "rendering") ||
		strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("build: exit %d, stderr %q; want exit 0, the output exactly and one line of stderr", r.code, r.stderr)
	}
	r = f.flux(t, "kcl", "diff", "kclartifact", "app", "-n", "apps", "--path", ".")
	assertInert(t, "diff kclartifact", r, 0)
	if r.code != 1 || !strings.Contains(r.stdout, "+++ b/ConfigMap/apps/app-config\n") {
		t.Errorf("diff kclartifact: exit %d; want 1 and the ConfigMap added", r.code)
	}

	// the engine's error quotes the program: an assert's message
	writeFile(t, filepath.Join(f.checkout, kclapp.ProgramPath),
		"assert False, \"fine\\n\\x1b]0;pwned\\x07\\x1b]8;;http://evil.example/\\x07click\\x1b]8;;\\x07\\u009b\\u202egnp.exe\"\n")
	r = f.flux(t, "kcl", "build", "kclartifact", "app", "-n", "apps", "--path", ".")
	assertInert(t, "build, assert", r, 0)
	if r.code != 1 || !strings.Contains(r.stderr, "gnp.exe") {
		t.Errorf("build, assert: exit %d, stderr %q; want exit 1 and the message", r.code, r.stderr)
	}
	r = f.flux(t, "kcl", "diff", "kclartifact", "app", "-n", "apps", "--path", ".")
	assertInert(t, "diff kclartifact, assert", r, 0)
	if r.code != 2 || !strings.Contains(r.stderr, "gnp.exe") {
		t.Errorf("diff kclartifact, assert: exit %d, stderr %q; want exit 2 and the message", r.code, r.stderr)
	}
	writeFile(t, filepath.Join(f.checkout, kclapp.ProgramPath), kclapp.Program)
}
