package fluxplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// The verbs against a kube-apiserver without controllers: what the plugin reads and writes by
// itself (the table, errors, patches, timeouts). test/e2e runs them with real controllers.

const (
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	digestC = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
	// secretValue is an argument value: no verb may print it
	secretValue = "s3cr3t-argument-value"
)

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := kclv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// oneFailure asserts exit 1, no stdout and exactly one ✗ line, equal to want.
func oneFailure(t *testing.T, r result, want string) {
	t.Helper()
	if r.code != 1 || r.stdout != "" || r.stderr != "✗ "+want+"\n" {
		t.Errorf("exit %d, stdout %q, stderr %q; want exit 1, no stdout, stderr %q", r.code, r.stdout, r.stderr, "✗ "+want+"\n")
	}
}

// lastLine is the last line of stderr.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func TestVerbsWithoutControllers(t *testing.T) {
	fluxBinary(t)
	cfg, kc := startClusterConfig(t)
	ctx := context.Background()

	oneFailure(t, flux(t, kc, "kcl", "get", "-A"),
		"the KCLArtifact CRD (kclartifacts.kcl.contrib.fluxcd.io) is not installed in the cluster: install kcl-artifact-controller")
	installCRDs(t, cfg)
	c := newClient(t, cfg)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}); err != nil {
		t.Fatal(err)
	}
	oneFailure(t, flux(t, kc, "kcl", "get", "-n", "apps"), "no KCLArtifact objects found in apps namespace")
	createFixtures(t, c)

	t.Run("get", func(t *testing.T) { testGet(t, kc) })
	t.Run("get --watch", func(t *testing.T) { testGetWatch(t, c, kc) })
	t.Run("reconcile", func(t *testing.T) { testReconcileErrors(t, c, kc) })
	t.Run("suspend and resume", func(t *testing.T) { testSuspendResume(t, c, kc) })
	t.Run("events", func(t *testing.T) { testEvents(t, c, kc) })
	t.Run("history, pin, rollback, unpin", func(t *testing.T) { testPins(t, c, kc) })
	t.Run("tree", func(t *testing.T) {
		r := flux(t, kc, "kcl", "tree", "podinfo", "-n", "apps")
		if want := "GitRepository/apps/podinfo\n└── KCLArtifact/apps/podinfo\n"; r.code != 0 || r.stdout != want {
			t.Errorf("tree: exit %d, stdout %q; want %q", r.code, r.stdout, want)
		}
	})
	t.Run("completion", func(t *testing.T) {
		comps, directive := completions(t, flux(t, kc, "__complete", "-n", "apps", "kcl", "get", ""))
		if directive != ":4" || strings.Join(comps, ",") != "ext,other,podinfo" {
			t.Errorf("flux __complete -n apps kcl get \"\": %q %s, want ext,other,podinfo :4", comps, directive)
		}
	})
}

// createFixtures creates podinfo, with the status of a rolled-back artifact whose Kustomization
// is suspended, and other, suspended and never reconciled.
func createFixtures(t *testing.T, c client.Client) {
	t.Helper()
	ctx := context.Background()
	podinfo := &kclv1.KCLArtifact{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: "apps"},
		Spec: kclv1.KCLArtifactSpec{
			SourceRef: kclv1.SourceReference{Kind: "GitRepository", Name: "podinfo"},
			Interval:  metav1.Duration{Duration: time.Minute},
			Arguments: map[string]string{"password": secretValue},
		},
	}
	if err := c.Create(ctx, podinfo); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	podinfo.Status = kclv1.KCLArtifactStatus{
		ObservedGeneration: podinfo.Generation,
		Artifact: &meta.Artifact{Path: "p.tar.gz", URL: "http://x/p.tar.gz", Revision: "latest@" + digestB,
			Digest: digestB, LastUpdateTime: now},
		Phase: "Ready",
		History: []kclv1.ArtifactHistoryEntry{
			{Digest: digestB, Revision: "latest@" + digestB, SourceRevision: "main@sha1:" + strings.Repeat("2", 40), URL: "http://x/b", Objects: 2, LastPublished: now, Health: kclv1.HealthFailed},
			{Digest: digestA, Revision: "latest@" + digestA, SourceRevision: "main@sha1:" + strings.Repeat("1", 40), URL: "http://x/a", Objects: 1, LastPublished: now, Health: kclv1.HealthHealthy},
		},
		Conditions: []metav1.Condition{
			{Type: "Ready", Status: "True", Reason: "Succeeded", Message: "stored artifact for revision main@sha1:" + strings.Repeat("c", 40), LastTransitionTime: now},
			{Type: kclv1.KustomizationReadyCondition, Status: "Unknown", Reason: kclv1.KustomizationSuspendedReason, Message: "suspended", LastTransitionTime: now},
		},
		Remediation: &kclv1.RemediationStatus{Quarantined: &kclv1.QuarantinedArtifact{
			Digest: digestC, Revision: "latest@" + digestC, TemplateDigest: digestC, RolledBackTo: digestB, RolledBackAt: now,
			Failure: kclv1.ArtifactFailure{Phase: "main", Reason: "HealthCheckFailed", Message: "timeout", At: now}}},
	}
	if err := c.Status().Update(ctx, podinfo); err != nil {
		t.Fatal(err)
	}
	other := podinfo.DeepCopy()
	other.ObjectMeta = metav1.ObjectMeta{Name: "other", Namespace: "apps"}
	other.Spec.Suspend = true
	other.Status = kclv1.KCLArtifactStatus{}
	if err := c.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
}

func testGet(t *testing.T, kc string) {
	r := flux(t, kc, "kcl", "get", "-n", "apps")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || r.stderr != "" || len(lines) != 3 {
		t.Fatalf("get: exit %d, stderr %q, %d lines; want exit 0, a header and 2 rows", r.code, r.stderr, len(lines))
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "NAME REVISION SUSPENDED READY APPLIED PHASE ROLLBACK MESSAGE" {
		t.Errorf("header %q", lines[0])
	}
	for line, want := range map[string][]string{
		lines[1]: {"other", "False", "-", "waiting to be reconciled", "True"},
		lines[2]: {"podinfo\t", "latest@sha256:bbbbbbbb", "False", "True", "Unknown (KustomizationSuspended)", "Ready",
			"rolled back from sha256:cccccccc to sha256:bbbbbbbb", "stored artifact for revision main@sha1:cccccccc\n"},
	} {
		for _, w := range want {
			if !strings.Contains(line+"\n", w) {
				t.Errorf("row %q lacks %q", line, w)
			}
		}
	}
	r = flux(t, kc, "kcl", "get", "podinfo", "-A")
	if !strings.HasPrefix(r.stdout, "NAMESPACE") || !strings.Contains(r.stdout, "\napps ") || strings.Count(r.stdout, "\n") != 2 {
		t.Errorf("get podinfo -A: %q; want a NAMESPACE column and one row", r.stdout)
	}
	oneFailure(t, flux(t, kc, "kcl", "get", "nope", "-n", "apps"), "KCLArtifact object 'nope' not found in apps namespace")
}

func testReconcileErrors(t *testing.T, c client.Client, kc string) {
	oneFailure(t, flux(t, kc, "kcl", "reconcile", "other", "-n", "apps"),
		"KCLArtifact other in apps namespace is suspended: flux kcl resume other first")
	oneFailure(t, flux(t, kc, "kcl", "reconcile", "nope", "-n", "apps"), "KCLArtifact object 'nope' not found in apps namespace")
	// no controller answers: the wait times out with one ✗ line after flux's progress lines
	start := time.Now()
	r := flux(t, kc, "-n", "apps", "--timeout", "2s", "kcl", "reconcile", "podinfo")
	want := "► annotating KCLArtifact podinfo in apps namespace\n✔ KCLArtifact annotated\n◎ waiting for KCLArtifact reconciliation\n" +
		"✗ timeout waiting for KCLArtifact podinfo in apps namespace to handle the reconcile request\n"
	if r.code != 1 || r.stderr != want {
		t.Errorf("reconcile --timeout 2s: exit %d, stderr %q; want exit 1, %q", r.code, r.stderr, want)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("reconcile --timeout 2s took %s", d)
	}

	// an ExternalArtifact cannot be requested: said, and the KCLArtifact is requested still
	ext := &kclv1.KCLArtifact{
		ObjectMeta: metav1.ObjectMeta{Name: "ext", Namespace: "apps"},
		Spec: kclv1.KCLArtifactSpec{SourceRef: kclv1.SourceReference{Kind: "ExternalArtifact", Name: "upstream"},
			Interval: metav1.Duration{Duration: time.Minute}},
	}
	if err := c.Create(context.Background(), ext); err != nil {
		t.Fatal(err)
	}
	r = flux(t, kc, "kcl", "reconcile", "ext", "-n", "apps", "--with-source", "--timeout", "1s")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "⚠️ source ExternalArtifact/apps/upstream cannot be requested to reconcile: its producer updates it\n"+
		"► annotating KCLArtifact ext in apps namespace\n") {
		t.Errorf("reconcile --with-source of an ExternalArtifact source: exit %d, stderr %q", r.code, r.stderr)
	}
}

func testSuspendResume(t *testing.T, c client.Client, kc string) {
	ctx := context.Background()
	oneFailure(t, flux(t, kc, "kcl", "suspend", "-n", "apps"), "give one KCLArtifact name or --all")
	r := flux(t, kc, "kcl", "suspend", "--all", "-n", "apps")
	if r.code != 0 || !strings.Contains(r.stderr, "► suspending KCLArtifact podinfo in apps namespace\n✔ KCLArtifact suspended\n") {
		t.Errorf("suspend --all: exit %d, stderr %q", r.code, r.stderr)
	}
	obj := &kclv1.KCLArtifact{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "apps", Name: "podinfo"}, obj); err != nil || !obj.Spec.Suspend {
		t.Errorf("podinfo after suspend --all: suspend=%v, %v", obj.Spec.Suspend, err)
	}
	r = flux(t, kc, "kcl", "resume", "podinfo", "-n", "apps", "--timeout", "2s")
	if r.code != 1 || !strings.HasPrefix(lastLine(r.stderr), "✗ timeout waiting for KCLArtifact podinfo") {
		t.Errorf("resume without a controller: exit %d, stderr %q; want a timeout", r.code, r.stderr)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "apps", Name: "podinfo"}, obj); err != nil || obj.Spec.Suspend {
		t.Errorf("podinfo after resume: suspend=%v, %v", obj.Spec.Suspend, err)
	}
}

func testEvents(t *testing.T, c client.Client, kc string) {
	ctx := context.Background()
	event := func(name, kind, obj, reason, msg string, at time.Time) {
		e := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: "apps"},
			InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: "apps", Name: obj},
			Reason:         reason, Message: msg, Type: "Normal", Count: 1,
			FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at),
		}
		if err := c.Create(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	event("e2", "KCLArtifact", "podinfo", "ArtifactUpToDate", "second", now.Add(-time.Minute))
	event("e1", "KCLArtifact", "podinfo", "Succeeded", "first", now.Add(-2*time.Minute))
	event("e3", "KCLArtifact", "other", "Succeeded", "not podinfo's", now)
	r := flux(t, kc, "kcl", "events", "podinfo", "-n", "apps")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "LAST SEEN") ||
		!strings.Contains(lines[1], "KCLArtifact/podinfo\tfirst") || !strings.Contains(lines[2], "second") {
		t.Errorf("events podinfo: exit %d, stdout %q; want the header, first, second", r.code, r.stdout)
	}
	// --watch: the watch starts with the existing events and ends at --timeout, exit 0 (flux
	// events --watch does the same)
	r = flux(t, kc, "kcl", "events", "podinfo", "-n", "apps", "--watch", "--timeout", "2s")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "LAST SEEN") || strings.Count(r.stdout, "KCLArtifact/podinfo") != 2 ||
		strings.Contains(r.stdout, "not podinfo's") {
		t.Errorf("events --watch: exit %d, stdout %q; want podinfo's 2 events", r.code, r.stdout)
	}
}

func testPins(t *testing.T, c client.Client, kc string) {
	ctx := context.Background()
	r := flux(t, kc, "kcl", "history", "podinfo", "-n", "apps")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], digestB) || !strings.Contains(lines[1], "Failed") ||
		!strings.HasSuffix(lines[1], "current") || !strings.Contains(lines[2], "main@sha1:11111111") {
		t.Errorf("history: exit %d, stdout %q", r.code, r.stdout)
	}
	oneFailure(t, flux(t, kc, "kcl", "pin", "podinfo", "sha256:99999999", "-n", "apps"),
		"digest sha256:99999999 not found in the history of KCLArtifact podinfo (flux kcl history podinfo)")
	pinned := func() string {
		obj := &kclv1.KCLArtifact{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "apps", Name: "podinfo"}, obj); err != nil {
			t.Fatal(err)
		}
		return obj.Spec.PinnedDigest
	}
	// no controller publishes: the wait times out, after the spec change is printed
	r = flux(t, kc, "kcl", "rollback", "podinfo", "-n", "apps", "--timeout", "2s")
	wantOut := "# KCLArtifact apps/podinfo\nspec:\n  pinnedDigest: " + digestA + "\n"
	if r.code != 1 || r.stdout != wantOut || !strings.Contains(r.stderr, "⚠️ this changed the cluster only: commit the change above to Git") ||
		pinned() != digestA {
		t.Errorf("rollback: exit %d, stdout %q, pinnedDigest %q; want the pin of %s printed and set", r.code, r.stdout, pinned(), digestA)
	}
	r = flux(t, kc, "kcl", "unpin", "podinfo", "-n", "apps", "--timeout", "1s")
	if !strings.Contains(r.stdout, "remove spec.pinnedDigest") || pinned() != "" {
		t.Errorf("unpin: stdout %q, pinnedDigest %q", r.stdout, pinned())
	}
	r = flux(t, kc, "kcl", "pin", "podinfo", "sha256:bbbbbbbb", "-n", "apps", "--timeout", "1s")
	if !strings.Contains(r.stdout, "pinnedDigest: "+digestB) || pinned() != digestB {
		t.Errorf("pin by prefix: stdout %q, pinnedDigest %q", r.stdout, pinned())
	}
}
