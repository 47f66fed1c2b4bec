package e2e

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// TestRollbackWithKustomizeController: with the real kustomize-controller, a commit whose
// Deployment never becomes ready (nothing runs Pods here) fails its health check, is retried
// once, and is rolled back: v1 is applied again and the Deployment pruned. The rollback holds
// over several intervals and a commit to an unrelated file, and across a controller restart
// with its storage and address kept (no render, and a kustomize-controller fetch made while it
// was down succeeds); the fixing commit is applied.
func TestRollbackWithKustomizeController(t *testing.T) {
	ns := newNamespace(t, "rollback")
	rev1 := gitRevision(createRepo(t, ns, program{version: "1"}.files()))
	createGitRepository(t, ns, "app", ns)
	obj := newKCLArtifact(ns, "app", "app", nil)
	obj.Spec.Interval = metav1.Duration{Duration: 5 * time.Second}
	obj.Spec.Remediation = &kclv1.Remediation{Retries: 1}
	// 30s: kustomize-controller never waits less for health checks (Kustomization.GetTimeout)
	obj.Spec.Kustomization = &kclv1.KustomizationTemplate{Wait: true, Timeout: &metav1.Duration{Duration: 30 * time.Second}}
	create(t, obj)
	obj = waitKCLArtifactReady(t, ns, "app", rev1)
	v1 := obj.Status.Artifact.DeepCopy()
	waitKCLArtifact(t, ns, "v1 to be healthy in status.history", func(o *kclv1.KCLArtifact) bool {
		return len(o.Status.History) > 0 && o.Status.History[0].Health == kclv1.HealthHealthy
	})
	data := func(version string) map[string]string {
		return map[string]string{"env": "dev", "greeting": "hello", "version": version}
	}
	waitConfigMap(t, ns, "app-config", data("1"))

	rev2 := commit(t, ns, "v2: a Deployment that never becomes ready", program{version: "2", deployment: true}.files())
	obj = waitKCLArtifactReady(t, ns, "app", rev2)
	published := time.Now()
	v2 := obj.Status.Artifact.DeepCopy()
	waitConfigMap(t, ns, "app-config", data("2"))
	// The failures themselves show only for an instant (the first is retried at once, the
	// second rolled back at once): the rollback is what is waited for.
	obj = waitKCLArtifact(t, ns, "the rollback", func(o *kclv1.KCLArtifact) bool {
		return conditionReason(o, kclv1.RemediatedCondition) == kclv1.RolledBackReason
	})
	rolledBack := time.Now()
	if q := obj.Status.Remediation.Quarantined; q.Digest != v2.Digest || q.RolledBackTo != v1.Digest || q.SourceRevision != rev2 ||
		q.Failure.Reason != meta.HealthCheckFailedReason {
		t.Errorf("quarantine %+v, want %s (HealthCheckFailed) rolled back to %s", q, v2.Digest, v1.Digest)
	}
	waitConfigMap(t, ns, "app-config", data("1"))
	waitGone(t, &appsv1.Deployment{}, ns, "app-web")
	t.Logf("figure: v2 published -> rolled back (30s health check timeout, 1 retry): %s; rolled back -> v1 applied again and v2's Deployment pruned: %s",
		rolledBack.Sub(published).Round(100*time.Millisecond), time.Since(rolledBack).Round(100*time.Millisecond))
	waitKustomizationApplied(t, ns, "app", v1.Revision)
	rendered := rendersOf(t, ns)
	// the metrics of a render and a rollback are in; the restart below resets them
	checkMonitoringPack(t, ns, "app", v1.Revision)

	// three intervals and more: v2 is never attempted again
	expectStays(t, ns, 20*time.Second, v1, v2)
	// a commit to an unrelated file renders v2 again: still rolled back
	rev3 := commit(t, ns, "docs", mergeFiles(program{version: "2", deployment: true}.files(), map[string]string{"README.md": "unrelated"}))
	waitKCLArtifact(t, ns, "the unrelated commit to be rendered", func(o *kclv1.KCLArtifact) bool {
		return o.Status.LastAttemptedRevision == rev3
	})
	if got := rendersOf(t, ns); got != rendered+1 {
		t.Errorf("renders of the unrelated commit: %d, want 1", got-rendered)
	}
	expectStays(t, ns, 10*time.Second, v1, v2)

	// A restart with the storage kept and the artifact server at the same address, as a Pod
	// restarted behind its Service: no render, still rolled back. kustomize-controller is asked
	// to reconcile while the controller is down: its fetch is refused and retried, and succeeds
	// once the controller is back. (Its retries keep the URL they started with, for about 3.5
	// min: had the address changed, as in TestControllerRestartWipedStorage with
	// kustomize-controller idle, this fetch would fail and the fix below wait for its end.)
	old := kclController()
	var ksToken string
	c := restartController(t, old.StorageAddr, func() {
		ksToken = annotateReconcile(t, &kustomizev1.Kustomization{}, ns, "app")
		waitLogLine(t, ns, suite.env.KustomizeController.LogPath, "kustomize-controller's fetch refused while the controller is down",
			ns, old.StorageAddr, "connection refused")
	})
	if ks := waitKustomizationHandled(t, ns, "app", ksToken); ks.Status.LastAppliedRevision != v1.Revision || !apimeta.IsStatusConditionTrue(ks.Status.Conditions, meta.ReadyCondition) {
		t.Errorf("Kustomization after the restart: %s, want v1 %s applied and Ready", kustomizationState(ks), v1.Revision)
	}
	token := annotateReconcile(t, &kclv1.KCLArtifact{}, ns, "app")
	obj = waitKCLArtifact(t, ns, "the restarted controller to handle reconcile request "+token, func(o *kclv1.KCLArtifact) bool {
		return o.Status.LastHandledReconcileAt == token
	})
	if prefix := fmt.Sprintf("%s/kclartifact/%s/app/", c.ArtifactURL(), ns); obj.Status.Artifact.Digest != v1.Digest ||
		!strings.HasPrefix(obj.Status.Artifact.URL, prefix) || conditionReason(obj, kclv1.RemediatedCondition) != kclv1.RolledBackReason {
		t.Errorf("after the restart: %s, want v1 %s at %s rolled back", kclArtifactState(obj), v1.Digest, prefix)
	}
	if n := rendersOf(t, ns); n != 0 {
		t.Errorf("renders after a restart with the storage kept: %d, want 0", n)
	}
	expectArtifactServed(t, obj.Status.Artifact)
	for _, e := range obj.Status.History {
		if e.Missing {
			t.Errorf("history entry %s is missing after a restart with the storage kept", e.Digest)
		}
	}

	// the fixing commit is tried, applied and clears the quarantine
	rev4 := commit(t, ns, "v3: fixed", program{version: "3"}.files())
	obj = waitKCLArtifactReady(t, ns, "app", rev4)
	waitKustomizationApplied(t, ns, "app", obj.Status.Artifact.Revision)
	waitConfigMap(t, ns, "app-config", data("3"))
	if obj.Status.Remediation != nil && obj.Status.Remediation.Quarantined != nil {
		t.Errorf("quarantine after the fix: %+v", obj.Status.Remediation.Quarantined)
	}
}

// expectStays samples for d that the KCLArtifact keeps serving good, rolled back, and that
// kustomize-controller never attempts bad again.
func expectStays(t *testing.T, ns string, d time.Duration, good, bad *meta.Artifact) {
	t.Helper()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(d)
	for {
		select {
		case <-deadline:
			return
		case <-tick.C:
		}
		obj := &kclv1.KCLArtifact{}
		ks := &kustomizev1.Kustomization{}
		if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "app"}, obj); err != nil {
			t.Fatal(err)
		}
		if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "app"}, ks); err != nil {
			t.Fatal(err)
		}
		if obj.Status.Artifact.Digest != good.Digest || getExternalArtifact(t, ns, "app").Status.Artifact.Digest != good.Digest {
			t.Fatalf("no longer serving %s: %s", good.Revision, kclArtifactState(obj))
		}
		if ks.Status.LastAttemptedRevision == bad.Revision {
			t.Fatalf("kustomize-controller attempted the quarantined artifact again: %s", kustomizationState(ks))
		}
	}
}

func waitKCLArtifact(t *testing.T, ns, what string, ok func(*kclv1.KCLArtifact) bool) *kclv1.KCLArtifact {
	t.Helper()
	obj := &kclv1.KCLArtifact{}
	waitFor(t, ns, what, func(ctx context.Context) (bool, string, error) {
		if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, obj); err != nil {
			return false, "", err
		}
		return ok(obj), kclArtifactState(obj), nil
	})
	return obj
}

func conditionReason(obj *kclv1.KCLArtifact, typ string) string {
	if c := apimeta.FindStatusCondition(obj.Status.Conditions, typ); c != nil {
		return c.Reason
	}
	return ""
}

func mergeFiles(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// rendersOf sums kcl_artifact_controller_renders_total of namespace ns in the running
// controller's metrics (0 for a controller that has not rendered there).
func rendersOf(t *testing.T, ns string) int {
	t.Helper()
	code, body, err := httpGet(t, kclController().MetricsURL())
	if err != nil || code != 200 {
		t.Fatalf("GET %s: %d %v", kclController().MetricsURL(), code, err)
	}
	n := 0
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "kcl_artifact_controller_renders_total{") || !strings.Contains(line, `namespace="`+ns+`"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		n += int(v)
	}
	return n
}
