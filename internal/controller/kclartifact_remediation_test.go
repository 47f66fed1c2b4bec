package controller

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// There is no kustomize-controller in envtest: the tests write the generated Kustomizations'
// status as it would (playKustomizeController, playKustomizeFailure, playRetry). The real one
// is in the node suite (test/node/rollback_test.go).

const healthCheckFailed = "health check failed after 30s: timeout waiting for: [Deployment/app/web status: 'InProgress']"

// remediated is a KCLArtifact with remediation that went v1 (healthy) → v2 (failed, retried once,
// failed again) → rolled back to v1.
type remediated struct {
	obj                      *kclv1.KCLArtifact
	healthy, failed          *meta.Artifact
	healthySource, badSource string
}

// healthyThenNew deploys v1, has it applied and healthy, then publishes v2 (not applied yet).
func healthyThenNew(f *fixture, remediation *kclv1.Remediation) (obj *kclv1.KCLArtifact, healthy *meta.Artifact) {
	f.t.Helper()
	f.commit("v1", map[string]string{"main.k": program})
	obj = f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) { s.Remediation = remediation }))
	healthy = obj.Status.Artifact.DeepCopy()
	playKustomizeController(f, "app", healthy.Revision)
	waitHealth(f, obj, healthy.Digest, kclv1.HealthHealthy)
	f.commit("v2", map[string]string{"main.k": strings.Replace(program, `or "dev"`, `or "broken"`, 1)})
	return f.waitRevision(obj, "v2"), healthy
}

func rollBackOnce(f *fixture) remediated {
	f.t.Helper()
	obj, healthy := healthyThenNew(f, &kclv1.Remediation{Retries: 1})
	failed := obj.Status.Artifact.DeepCopy()
	f.g.Expect(failed.Digest).NotTo(Equal(healthy.Digest))
	playKustomizeFailure(f, "app", failed.Revision, meta.HealthCheckFailedReason, healthCheckFailed)
	// the first failure: a retry is asked of kustomize-controller, nothing is rolled back yet
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.Remediation).NotTo(BeNil())
		g.Expect(obj.Status.Remediation.Failures).To(Equal(1))
		g.Expect(obj.Status.Remediation.RetryRequestedAt).NotTo(BeEmpty())
	}, timeout, interval).Should(Succeed())
	f.g.Expect(obj.Status.Artifact.Digest).To(Equal(failed.Digest))
	playRetry(f, "app", obj.Status.Remediation.RetryRequestedAt, failed.Revision, healthCheckFailed)
	obj = waitRemediated(f, obj, metav1.ConditionTrue, kclv1.RolledBackReason)
	return remediated{obj: obj, healthy: healthy, failed: failed, healthySource: "main@sha1:v1", badSource: "main@sha1:v2"}
}

func TestRollbackPublishesTheLastHealthyArtifactAgain(t *testing.T) {
	f := newFixture(t)
	rb := rollBackOnce(f)
	obj := rb.obj

	f.g.Expect(obj.Status.Artifact.Digest).To(Equal(rb.healthy.Digest))
	f.g.Expect(obj.Status.SourceRevision).To(Equal(rb.healthySource))
	q := obj.Status.Remediation.Quarantined
	f.g.Expect(q).NotTo(BeNil())
	f.g.Expect(q.Digest).To(Equal(rb.failed.Digest))
	f.g.Expect(q.SourceRevision).To(Equal(rb.badSource))
	f.g.Expect(q.RolledBackTo).To(Equal(rb.healthy.Digest))
	f.g.Expect(q.Failure.Reason).To(Equal(meta.HealthCheckFailedReason))
	f.g.Expect(q.Failure.Message).To(Equal(healthCheckFailed))
	ready := conditions.Get(obj, meta.ReadyCondition)
	f.g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	f.g.Expect(ready.Reason).To(Equal(kclv1.RolledBackReason))
	f.g.Expect(ready.Message).To(And(ContainSubstring(rb.failed.Revision), ContainSubstring(rb.healthy.Revision)))
	// the rollback is a finished reconcile: kstatus reads the object as current, not in progress
	f.g.Expect(conditions.Has(obj, meta.ReconcilingCondition)).To(BeFalse(), "Reconciling after a rollback: %+v", obj.Status.Conditions)
	f.g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))

	// the ExternalArtifact serves v1 again, and history says what became of each
	f.g.Expect(externalArtifactDigest(f, "app")).To(Equal(rb.healthy.Digest))
	f.g.Expect(obj.Status.History[0].Digest).To(Equal(rb.healthy.Digest))
	f.g.Expect(obj.Status.History[0].Health).To(Equal(kclv1.HealthProgressing), "published again: health is read anew")
	f.g.Expect(obj.Status.History[0].HealthyAt).NotTo(BeNil())
	f.g.Expect(obj.Status.History[1].Digest).To(Equal(rb.failed.Digest))
	f.g.Expect(obj.Status.History[1].Health).To(Equal(kclv1.HealthFailed))
	f.g.Expect(obj.Status.History[1].Failure.Reason).To(Equal(meta.HealthCheckFailedReason))

	// the warning names what was undone, links the diff and marks the failed commit
	group := kclv1.GroupVersion.Group + "/"
	f.g.Eventually(func(g Gomega) {
		var found *eventv1.Event
		for _, e := range eventsReceiver.of(obj) {
			if e.Reason == kclv1.RolledBackReason {
				found = &e
			}
		}
		g.Expect(found).NotTo(BeNil())
		g.Expect(found.Severity).To(Equal(eventv1.EventSeverityError))
		g.Expect(found.Message).To(And(ContainSubstring("undone: 1 added, 1 removed: "),
			ContainSubstring("ConfigMap/app-dev"), ContainSubstring("ConfigMap/app-broken")))
		g.Expect(found.Metadata).To(HaveKeyWithValue(group+eventv1.MetaOriginRevisionKey, rb.badSource))
		g.Expect(found.Metadata).To(HaveKeyWithValue(group+diffURLKey, ContainSubstring("from="+strings.ReplaceAll(rb.failed.Digest, ":", "%3A"))))
	}, timeout, interval).Should(Succeed())

	// kustomize-controller applies v1: healthy again
	playKustomizeController(f, "app", rb.healthy.Revision)
	waitHealth(f, obj, rb.healthy.Digest, kclv1.HealthHealthy)
	f.g.Expect(conditions.GetMessage(obj, kclv1.RemediatedCondition)).To(HaveSuffix("it is healthy"))
}

// A commit to an unrelated file renders the failed artifact again: it stays rolled back, over
// several reconciliations. A commit that renders something else is tried.
func TestQuarantineHoldsUntilTheInputsRenderAnotherArtifact(t *testing.T) {
	f := newFixture(t)
	rb := rollBackOnce(f)
	obj := rb.obj
	playKustomizeController(f, "app", rb.healthy.Revision)
	waitHealth(f, obj, rb.healthy.Digest, kclv1.HealthHealthy)

	before := renders.Load()
	f.commit("v2-readme", map[string]string{"main.k": strings.Replace(program, `or "dev"`, `or "broken"`, 1), "README.md": "unrelated"})
	obj = f.waitRevision(obj, "v2-readme")
	f.g.Expect(renders.Load()).To(BeNumerically(">", before), "a new source revision is rendered")
	for range 3 {
		f.requestReconcile(obj)
		f.g.Expect(obj.Status.Artifact.Digest).To(Equal(rb.healthy.Digest))
		f.g.Expect(externalArtifactDigest(f, "app")).To(Equal(rb.healthy.Digest))
		f.g.Expect(conditions.GetReason(obj, kclv1.RemediatedCondition)).To(Equal(kclv1.RolledBackReason))
	}
	rendered := renders.Load()
	f.requestReconcile(obj)
	f.g.Expect(renders.Load()).To(Equal(rendered), "the inputs of the quarantined artifact are not rendered again")

	f.commit("v3", map[string]string{"main.k": strings.Replace(program, `or "dev"`, `or "fixed"`, 1)})
	obj = f.waitRevision(obj, "v3")
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(conditions.IsReady(obj)).To(BeTrue())
	}, timeout, interval).Should(Succeed())
	f.g.Expect(obj.Status.SourceRevision).To(Equal("main@sha1:v3"))
	f.g.Expect(obj.Status.Remediation).To(BeNil())
	f.g.Expect(conditions.Has(obj, kclv1.RemediatedCondition)).To(BeFalse())
	f.g.Expect(externalArtifactDigest(f, "app")).To(Equal(obj.Status.Artifact.Digest))
}

// reconcile.fluxcd.io/resetAt forgets the failures and the quarantine: the failed artifact is
// published again and tried.
func TestResetAtTriesTheQuarantinedArtifactAgain(t *testing.T) {
	f := newFixture(t)
	rb := rollBackOnce(f)
	obj := rb.obj
	token := time.Now().Format(time.RFC3339Nano)
	f.annotate(obj, map[string]string{meta.ReconcileRequestAnnotation: token, kclv1.ResetRequestAnnotation: token})
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.LastHandledResetAt).To(Equal(token))
		g.Expect(obj.Status.Artifact.Digest).To(Equal(rb.failed.Digest))
	}, timeout, interval).Should(Succeed())
	f.g.Expect(conditions.Has(obj, kclv1.RemediatedCondition)).To(BeFalse())
	f.g.Expect(conditions.IsReady(obj)).To(BeTrue())
	f.g.Expect(externalArtifactDigest(f, "app")).To(Equal(rb.failed.Digest))
	// the failure kustomize-controller reported before the reset is not counted: a new verdict
	// is asked for
	rem := obj.Status.Remediation
	f.g.Expect(rem.Quarantined).To(BeNil())
	f.g.Expect(rem.Failures).To(BeZero())
	f.g.Expect(rem.RetryRequestedAt).NotTo(BeEmpty())
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}
	f.g.Expect(f.get(ks).GetAnnotations()).To(HaveKeyWithValue(meta.ReconcileRequestAnnotation, rem.RetryRequestedAt))
	// it fails again: counted once, and retried
	playRetry(f, "app", rem.RetryRequestedAt, rb.failed.Revision, healthCheckFailed)
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.Remediation.Failures).To(Equal(1))
		g.Expect(obj.Status.Remediation.RetryRequestedAt).NotTo(Equal(rem.RetryRequestedAt))
	}, timeout, interval).Should(Succeed())
}

// Another Kustomization template (here a longer timeout) tries the failed artifact again.
func TestATemplateChangeTriesTheQuarantinedArtifactAgain(t *testing.T) {
	f := newFixture(t)
	rb := rollBackOnce(f)
	f.update(rb.obj, func(s *kclv1.KCLArtifactSpec) {
		s.Kustomization = &kclv1.KustomizationTemplate{Timeout: &metav1.Duration{Duration: 10 * time.Minute}}
	})
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(rb.obj), rb.obj)).To(Succeed())
		g.Expect(rb.obj.Status.Artifact.Digest).To(Equal(rb.failed.Digest))
		g.Expect(rb.obj.Status.Remediation.Quarantined).To(BeNil())
	}, timeout, interval).Should(Succeed())
}

// The artifact rolled back to fails too: the KCLArtifact says so and does nothing more.
func TestAFailedRollbackStops(t *testing.T) {
	f := newFixture(t)
	rb := rollBackOnce(f)
	obj := rb.obj
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}
	f.get(ks)
	asked := ks.Annotations[meta.ReconcileRequestAnnotation]
	playKustomizeFailure(f, "app", rb.healthy.Revision, meta.HealthCheckFailedReason, healthCheckFailed)
	obj = waitRemediated(f, obj, metav1.ConditionFalse, kclv1.RollbackFailedReason)
	for range 3 {
		f.requestReconcile(obj)
		f.g.Expect(obj.Status.Artifact.Digest).To(Equal(rb.healthy.Digest), "no flapping back to the failed artifact")
		f.g.Expect(conditions.GetReason(obj, kclv1.RemediatedCondition)).To(Equal(kclv1.RollbackFailedReason))
		f.get(ks)
		f.g.Expect(ks.Annotations[meta.ReconcileRequestAnnotation]).To(Equal(asked), "no retry of a failed rollback")
	}
	f.g.Expect(obj.Status.History[0].Health).To(Equal(kclv1.HealthFailed))
	f.g.Eventually(func() []string { return reasons(eventsReceiver.of(obj)) }, timeout, interval).
		Should(ContainElement("error/" + kclv1.RollbackFailedReason))
}

// A first deployment that fails has nothing to go back to.
func TestNothingToRollBackTo(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) { s.Remediation = &kclv1.Remediation{} }))
	failed := obj.Status.Artifact.DeepCopy()
	playKustomizeFailure(f, "app", failed.Revision, meta.HealthCheckFailedReason, healthCheckFailed)
	obj = waitRemediated(f, obj, metav1.ConditionFalse, kclv1.NothingToRollBackToReason)
	f.g.Expect(obj.Status.Artifact.Digest).To(Equal(failed.Digest))
	f.g.Expect(conditions.IsReady(obj)).To(BeTrue(), "the artifact is stored; KustomizationReady says it failed")
	f.g.Expect(conditions.GetReason(obj, kclv1.KustomizationReadyCondition)).To(Equal(meta.HealthCheckFailedReason))
	f.g.Expect(obj.Status.History[0].Health).To(Equal(kclv1.HealthFailed))
}

// The newest healthy artifact is the rollback target, so historyLimit never trims it away while
// newer ones have not proved healthy: historyLimit artifacts published in a row before any turned
// healthy (historyLimit: 1 included) still roll back to it, and its file stays in storage.
func TestRollbackTargetOutlivesHistoryLimit(t *testing.T) {
	for name, limit := range map[string]int{"historyLimit 1": 1, "historyLimit 2": 2} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			f.commit("v1", map[string]string{"main.k": program})
			obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) {
				s.Remediation, s.HistoryLimit = &kclv1.Remediation{}, ptr.To(limit)
			}))
			healthy := obj.Status.Artifact.DeepCopy()
			playKustomizeController(f, "app", healthy.Revision)
			waitHealth(f, obj, healthy.Digest, kclv1.HealthHealthy)
			// historyLimit new artifacts, none of them healthy yet
			for i := 1; i <= limit; i++ {
				rev := fmt.Sprintf("v%d", i+1)
				f.commit(rev, map[string]string{"main.k": strings.Replace(program, `or "dev"`, `or "broken`+rev+`"`, 1)})
				obj = f.waitRevision(obj, rev)
			}
			f.g.Expect(obj.Status.History).To(HaveLen(limit+1), "historyLimit newer entries and the rollback target")
			f.g.Expect(obj.Status.History[limit].Digest).To(Equal(healthy.Digest))
			f.g.Expect(obj.Status.History[limit].Missing).To(BeFalse())
			failed := obj.Status.Artifact.DeepCopy()
			playKustomizeFailure(f, "app", failed.Revision, meta.HealthCheckFailedReason, healthCheckFailed)
			obj = waitRemediated(f, obj, metav1.ConditionTrue, kclv1.RolledBackReason)
			f.g.Expect(obj.Status.Artifact.Digest).To(Equal(healthy.Digest))
			f.g.Expect(externalArtifactDigest(f, "app")).To(Equal(healthy.Digest))
			f.g.Expect(obj.Status.Remediation.Quarantined.Digest).To(Equal(failed.Digest))

			// once a newer one is healthy, the old target is trimmed as usual
			playKustomizeController(f, "app", healthy.Revision)
			waitHealth(f, obj, healthy.Digest, kclv1.HealthHealthy)
			f.commit("fixed", map[string]string{"main.k": strings.Replace(program, `or "dev"`, `or "fixed"`, 1)})
			obj = f.waitRevision(obj, "fixed")
			fixed := obj.Status.Artifact.DeepCopy()
			playKustomizeController(f, "app", fixed.Revision)
			waitHealth(f, obj, fixed.Digest, kclv1.HealthHealthy)
			f.requestReconcile(obj)
			f.g.Expect(obj.Status.History).To(HaveLen(limit))
			f.g.Expect(obj.Status.History[0].Digest).To(Equal(fixed.Digest))
		})
	}
}

// A rollback target whose file is gone from storage is not one: status marks it missing.
func TestMissingRollbackTargetIsNotUsed(t *testing.T) {
	f := newFixture(t)
	obj, healthy := healthyThenNew(f, &kclv1.Remediation{})
	f.g.Expect(os.Remove(testStorage.LocalPath(*healthy))).To(Succeed())
	f.requestReconcile(obj)
	f.g.Expect(obj.Status.History[1].Missing).To(BeTrue())
	playKustomizeFailure(f, "app", obj.Status.Artifact.Revision, meta.HealthCheckFailedReason, healthCheckFailed)
	obj = waitRemediated(f, obj, metav1.ConditionFalse, kclv1.NothingToRollBackToReason)
	f.g.Expect(obj.Status.Artifact.Digest).NotTo(Equal(healthy.Digest))
}

// Without spec.remediation a failed artifact stays published, as it always did; its health is
// recorded all the same.
func TestRemediationIsOffByDefault(t *testing.T) {
	f := newFixture(t)
	obj, _ := healthyThenNew(f, nil)
	failed := obj.Status.Artifact.DeepCopy()
	playKustomizeFailure(f, "app", failed.Revision, meta.HealthCheckFailedReason, healthCheckFailed)
	waitHealth(f, obj, failed.Digest, kclv1.HealthFailed)
	f.requestReconcile(obj)
	f.g.Expect(obj.Status.Artifact.Digest).To(Equal(failed.Digest))
	f.g.Expect(obj.Status.Remediation).To(BeNil())
	f.g.Expect(conditions.Has(obj, kclv1.RemediatedCondition)).To(BeFalse())
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}
	f.g.Expect(f.get(ks).GetAnnotations()).NotTo(HaveKey(meta.ReconcileRequestAnnotation))
}

// A pin wins over remediation; without a generated Kustomization there is nothing to read
// health from, and status says so.
func TestRemediationDefersToPinAndNeedsTheKustomization(t *testing.T) {
	f := newFixture(t)
	obj, _ := healthyThenNew(f, &kclv1.Remediation{})
	second := obj.Status.Artifact.DeepCopy()
	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.PinnedDigest = second.Digest })
	obj = f.waitFor(obj, metav1.ConditionTrue, kclv1.PinnedReason)
	playKustomizeFailure(f, "app", second.Revision, meta.HealthCheckFailedReason, healthCheckFailed)
	waitHealth(f, obj, second.Digest, kclv1.HealthFailed)
	f.requestReconcile(obj)
	f.g.Expect(obj.Status.Artifact.Digest).To(Equal(second.Digest), "the pin wins")
	f.g.Expect(conditions.Has(obj, kclv1.RemediatedCondition)).To(BeFalse())

	f.update(obj, func(s *kclv1.KCLArtifactSpec) {
		s.PinnedDigest = ""
		s.Kustomization = &kclv1.KustomizationTemplate{Disabled: true}
	})
	waitRemediated(f, obj, metav1.ConditionFalse, kclv1.RemediationUnavailableReason)
}

func waitHealth(f *fixture, obj *kclv1.KCLArtifact, digest, health string) {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		var got string
		for _, e := range obj.Status.History {
			if e.Digest == digest {
				got = e.Health
			}
		}
		g.Expect(got).To(Equal(health))
	}, timeout, interval).Should(Succeed())
}

func waitRemediated(f *fixture, obj *kclv1.KCLArtifact, status metav1.ConditionStatus, reason string) *kclv1.KCLArtifact {
	f.t.Helper()
	waitCondition(f, obj, kclv1.RemediatedCondition, status, reason)
	return obj
}

// playRetry is kustomize-controller handling the reconcile request at and failing again.
func playRetry(f *fixture, name, at, attempted, message string) {
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(ks), ks)).To(Succeed())
		g.Expect(ks.Annotations).To(HaveKeyWithValue(meta.ReconcileRequestAnnotation, at))
		ks.Status.ObservedGeneration = ks.Generation
		ks.Status.LastAttemptedRevision = attempted
		ks.Status.LastHandledReconcileAt = at
		conditions.MarkFalse(ks, meta.ReadyCondition, meta.HealthCheckFailedReason, "%s", message)
		g.Expect(k8sClient.Status().Update(f.ctx, ks)).To(Succeed())
	}, timeout, interval).Should(Succeed())
}

func externalArtifactDigest(f *fixture, name string) string {
	ea := &sourcev1.ExternalArtifact{}
	ea.Name, ea.Namespace = name, f.ns
	f.get(ea)
	if ea.Status.Artifact == nil {
		return ""
	}
	return ea.Status.Artifact.Digest
}

// helmHooksProgram ports a chart's hooks: a migration run on install and upgrade, its undoing
// run on rollback, and a smoke test after install and upgrade.
const helmHooksProgram = `_v = option("v") or "1"
_job = lambda name: str, hook: str {
    {
        apiVersion = "batch/v1", kind = "Job"
        metadata = {name = name, annotations = {"helm.sh/hook" = hook}}
        spec.template.spec = {restartPolicy = "Never", containers = [{name = "c", image = "busybox:${_v}"}]}
    }
}
[
    _job("migrate", "pre-install,pre-upgrade")
    _job("undo", "pre-rollback")
    {apiVersion = "apps/v1", kind = "Deployment", metadata.name = "web", spec = {selector.matchLabels.app = "web", template = {metadata.labels.app = "web", spec.containers = [{name = "web", image = "web:${_v}"}]}}}
    _job("smoke", "post-install,post-upgrade")
]
`

// A failed smoke test (post phase) rolls the whole artifact back: main goes back to v1, the
// pre phase of the rollback runs the pre-rollback hook instead of the migration, and the smoke
// test, a post-upgrade hook, does not run.
func TestAFailedPostPhaseRollsMainBackWithRollbackHooks(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": helmHooksProgram})
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) { s.Remediation = &kclv1.Remediation{} }))
	healthy := obj.Status.Artifact.DeepCopy()
	files := artifactFilesAt(f.g, healthy.URL)
	f.g.Expect(files["pre/manifests.yaml"]).To(And(ContainSubstring("name: migrate"), Not(ContainSubstring("name: undo"))))
	f.g.Expect(files["rollback/pre/manifests.yaml"]).To(And(ContainSubstring("name: undo"), Not(ContainSubstring("name: migrate"))))
	f.g.Expect(files["rollback/post/manifests.yaml"]).To(BeEmpty())
	f.g.Expect(obj.Status.InventoryCount).To(Equal(3), "the rollback hook is not deployed")
	for _, name := range []string{"app-pre", "app", "app-post"} {
		playKustomizeController(f, name, healthy.Revision)
	}
	waitHealth(f, obj, healthy.Digest, kclv1.HealthHealthy)

	f.commit("v2", map[string]string{"main.k": strings.Replace(helmHooksProgram, `or "1"`, `or "2"`, 1)})
	obj = f.waitRevision(obj, "v2")
	failed := obj.Status.Artifact.DeepCopy()
	playKustomizeController(f, "app-pre", failed.Revision)
	playKustomizeController(f, "app", failed.Revision)
	playKustomizeFailure(f, "app-post", failed.Revision, meta.HealthCheckFailedReason,
		"health check failed after 1m0s: failed early due to stalled resources: [Job/"+f.ns+"/smoke status: 'Failed']")
	obj = waitRemediated(f, obj, metav1.ConditionTrue, kclv1.RolledBackReason)

	f.g.Expect(obj.Status.Artifact.Digest).To(Equal(healthy.Digest))
	q := obj.Status.Remediation.Quarantined
	f.g.Expect(q.Failure.Phase).To(Equal("post"))
	f.g.Expect(q.RollbackPhasesApart).To(BeTrue())
	f.g.Expect(obj.Status.Phases).To(HaveLen(2))
	f.g.Expect(obj.Status.Phases[0].Name).To(Equal("pre"))
	f.g.Expect(obj.Status.Phases[0].Objects).To(Equal(1))
	f.g.Expect(obj.Status.Phases[1].Name).To(Equal("main"))
	spec := func(name string) kustomizev1.KustomizationSpec {
		return f.get(&kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}).(*kustomizev1.Kustomization).Spec
	}
	// the pre phase of a rollback is another Kustomization: kustomize-controller never applies
	// v1's pre directory (its upgrade hooks) with the spec of a rollback, or the reverse
	f.g.Expect(obj.Status.Phases[0].Kustomization).To(Equal("app-pre-rollback"))
	f.g.Expect(spec("app-pre-rollback").Path).To(Equal("./rollback/pre"))
	f.g.Expect(spec("app").Path).To(Equal("./main"))
	f.g.Expect(spec("app").DependsOn).To(Equal([]kustomizev1.DependencyReference{{Name: "app-pre-rollback"}}))
	for _, gone := range []string{"app-pre", "app-post"} {
		f.g.Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: gone}, &kustomizev1.Kustomization{}))
		}, timeout, interval).Should(BeTrue(), gone)
	}

	// the rollback applied: healthy, and still rolled back
	playKustomizeController(f, "app-pre-rollback", healthy.Revision)
	playKustomizeController(f, "app", healthy.Revision)
	waitHealth(f, obj, healthy.Digest, kclv1.HealthHealthy)
	f.g.Expect(conditions.GetReason(obj, kclv1.RemediatedCondition)).To(Equal(kclv1.RolledBackReason))

	// rolling forward goes back to the Kustomizations of a deploy
	f.commit("v3", map[string]string{"main.k": strings.Replace(helmHooksProgram, `or "1"`, `or "3"`, 1)})
	obj = f.waitRevision(obj, "v3")
	f.g.Expect(spec("app-pre").Path).To(Equal("./pre"))
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "app-pre-rollback"}, &kustomizev1.Kustomization{}))
	}, timeout, interval).Should(BeTrue())
}

// The artifact rolled back to is gone from storage (an emptyDir lost in a restart) while the
// inputs render the quarantined one: neither is published, and status says why and what to do.
func TestRolledBackArtifactGoneFromStorage(t *testing.T) {
	f := newFixture(t)
	rb := rollBackOnce(f)
	f.g.Expect(os.Remove(testStorage.LocalPath(*rb.obj.Status.Artifact))).To(Succeed())
	f.commit("v2-readme", map[string]string{"main.k": strings.Replace(program, `or "dev"`, `or "broken"`, 1), "README.md": "unrelated"})
	obj := f.waitFor(rb.obj, metav1.ConditionFalse, kclv1.StorageFailedReason)
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(And(
		ContainSubstring("no longer in storage"), ContainSubstring("resetAt"), ContainSubstring(rb.failed.Revision)))
	f.g.Expect(externalArtifactDigest(f, "app")).To(Equal(rb.healthy.Digest), "the quarantined artifact is not published")
}

// A failure with nothing to roll back to is over once the artifact turns healthy (here
// kustomize-controller's own retry succeeded).
func TestRemediatedIsClearedWhenTheArtifactTurnsHealthy(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) { s.Remediation = &kclv1.Remediation{} }))
	rev := obj.Status.Artifact.Revision
	playKustomizeFailure(f, "app", rev, meta.HealthCheckFailedReason, healthCheckFailed)
	obj = waitRemediated(f, obj, metav1.ConditionFalse, kclv1.NothingToRollBackToReason)
	playKustomizeController(f, "app", rev)
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(conditions.Has(obj, kclv1.RemediatedCondition)).To(BeFalse())
		g.Expect(obj.Status.Remediation).To(BeNil())
	}, timeout, interval).Should(Succeed())
}

// A pin to a kept artifact whose file is gone (an emptyDir lost in a restart) fails, says why,
// and status marks the entry missing rather than pretending it is there.
func TestPinToAMissingArtifactMarksItMissing(t *testing.T) {
	f := newFixture(t)
	obj, first := healthyThenNew(f, nil)
	f.g.Expect(os.Remove(testStorage.LocalPath(*first))).To(Succeed())
	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.PinnedDigest = first.Digest })
	obj = f.waitFor(obj, metav1.ConditionFalse, kclv1.PinnedArtifactNotFoundReason)
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(ContainSubstring("config/persistent-storage"))
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.History).To(HaveLen(2))
		g.Expect(obj.Status.History[1].Digest).To(Equal(first.Digest))
		g.Expect(obj.Status.History[1].Missing).To(BeTrue())
		g.Expect(obj.Status.History[0].Missing).To(BeFalse())
	}, timeout, interval).Should(Succeed())
}

// An object a program names after a value it reads from a Secret is masked in the RolledBack
// event's summary of what was undone, as in the new-artifact event: alerts carry it to chats.
func TestRolledBackSummaryMasksNamesFromSecrets(t *testing.T) {
	f := newFixture(t)
	named := secretUserAndProgram(f)
	f.commit("s1", map[string]string{"main.k": named(`"plain"`)})
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) {
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "Secret", Name: "db"}}
		s.Remediation = &kclv1.Remediation{}
	}))
	playKustomizeController(f, "app", obj.Status.Artifact.Revision)
	waitHealth(f, obj, obj.Status.Artifact.Digest, kclv1.HealthHealthy)
	f.commit("s2", map[string]string{"main.k": named(`option("user")`)})
	obj = f.waitRevision(obj, "s2")
	playKustomizeFailure(f, "app", obj.Status.Artifact.Revision, meta.HealthCheckFailedReason, healthCheckFailed)
	waitRemediated(f, obj, metav1.ConditionTrue, kclv1.RolledBackReason)
	var rolled eventv1.Event
	f.g.Eventually(func() string {
		for _, e := range eventsReceiver.of(obj) {
			if e.Reason == kclv1.RolledBackReason {
				rolled = e
			}
		}
		return rolled.Message
	}, timeout, interval).Should(ContainSubstring("undone: "))
	f.g.Expect(rolled.Message).To(ContainSubstring("ConfigMap/***"))
	f.g.Expect(rolled.Message).NotTo(ContainSubstring("topsecret-user-42"))
}
