package controller

import (
	"context"
	"fmt"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/metrics"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promotion"
	"github.com/kcl-flux/kcl-artifact-controller/internal/reconcile/summarize"
	"github.com/kcl-flux/kcl-artifact-controller/internal/remediation"
)

// reconcileHealth records the published artifact's health, as its Kustomizations say it, on
// its history entry; with spec.remediation, a failed artifact is retried, then rolled back.
func (r *KCLArtifactReconciler) reconcileHealth(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	if obj.Status.Artifact == nil {
		return nil
	}
	ctx, cancel := bounded(ctx, r.Bounds.PublishTimeout)
	defer cancel()
	if p.retryAll {
		if err := r.retryAll(ctx, obj, p.live); err != nil {
			return err
		}
	}
	v := artifactVerdict(obj, p.live)
	markHealth(obj, v, false)
	return r.remediate(ctx, obj, p.live, v, p.rejections, p.sensitive())
}

// verdict is what the generated Kustomizations say of the published artifact.
type verdict struct {
	// health is Healthy, Failed or Progressing; "" when no Kustomization is generated.
	health  string
	failure *kclv1.ArtifactFailure
	// failedAt is the index of the failed phase's Kustomization in the live ones.
	failedAt int
}

// artifactVerdict reads the health of the published artifact from its Kustomizations, in phase
// order, each about this artifact's revision only (phaseState): the first failed phase fails it,
// every phase Ready makes it healthy.
func artifactVerdict(obj *kclv1.KCLArtifact, live []*kustomizev1.Kustomization) verdict {
	if !obj.KustomizationEnabled() || len(live) == 0 || obj.Status.Artifact == nil {
		return verdict{}
	}
	states := obj.Status.Phases
	if len(states) == 0 {
		state, msg := phaseState(obj, live[0], conditions.IsTrue(obj, kclv1.KustomizationReadyCondition))
		states = []kclv1.PhaseStatus{{State: state, Message: msg}}
	}
	healthy := true
	for i, s := range states {
		if s.State == kclv1.PhaseFailed && i < len(live) {
			return verdict{health: kclv1.HealthFailed, failedAt: i, failure: &kclv1.ArtifactFailure{
				Phase: s.Name, Reason: conditions.GetReason(live[i], meta.ReadyCondition), Message: clean(s.Message), At: metav1.Now()}}
		}
		healthy = healthy && s.State == kclv1.PhaseReady
	}
	if healthy {
		return verdict{health: kclv1.HealthHealthy}
	}
	return verdict{health: kclv1.HealthProgressing}
}

// markHealth records a verdict on the history entry of the published artifact; restart starts
// its verdict over (it is published again by a rollback). A verdict holds until the opposite
// one: a Kustomization reconciling a healthy artifact again does not make it Progressing, which
// would write the status twice per interval. Entries replaced while still Progressing were never
// applied.
func markHealth(obj *kclv1.KCLArtifact, v verdict, restart bool) {
	cur := obj.Status.Artifact
	for i := range obj.Status.History {
		e := &obj.Status.History[i]
		if cur == nil || e.Digest != cur.Digest {
			if e.Health == kclv1.HealthProgressing {
				e.Health = kclv1.HealthNotApplied
			}
			continue
		}
		switch {
		case restart:
			e.Health = kclv1.HealthProgressing
		case v.health == kclv1.HealthHealthy && e.Health != kclv1.HealthHealthy:
			e.Health, e.Failure = kclv1.HealthHealthy, nil
			if e.HealthyAt == nil {
				now := metav1.Now()
				e.HealthyAt = &now
			}
		case v.health == kclv1.HealthFailed && (e.Health != kclv1.HealthFailed || !sameFailure(e.Failure, v.failure)):
			e.Health, e.Failure = kclv1.HealthFailed, v.failure
		case v.health == kclv1.HealthProgressing && (e.Health == "" || e.Health == kclv1.HealthNotApplied):
			e.Health = kclv1.HealthProgressing
		}
	}
}

func sameFailure(a, b *kclv1.ArtifactFailure) bool {
	return a != nil && b != nil && a.Phase == b.Phase && a.Reason == b.Reason && a.Message == b.Message
}

// retryAll asks every phase's Kustomization for a new verdict on the published artifact: the
// failure they report may be from before a reset, about this very artifact.
func (r *KCLArtifactReconciler) retryAll(ctx context.Context, obj *kclv1.KCLArtifact, live []*kustomizev1.Kustomization) error {
	if obj.Spec.Remediation == nil || obj.Spec.PinnedDigest != "" || obj.Status.Artifact == nil || len(live) == 0 {
		return nil
	}
	at, err := r.requestReconcile(ctx, live...)
	if err != nil {
		return err
	}
	obj.Status.Remediation = &kclv1.RemediationStatus{Digest: obj.Status.Artifact.Digest, RetryRequestedAt: at}
	return nil
}

// remediate acts on the health of the published artifact, once the generated Kustomizations
// have been brought in line with it. live are those Kustomizations, in phase order; sensitive
// are the argument values read from Secrets, masked in what the rollback event names.
func (r *KCLArtifactReconciler) remediate(ctx context.Context, obj *kclv1.KCLArtifact, live []*kustomizev1.Kustomization, v verdict, rs []promotion.Rejection, sensitive []string) error {
	switch {
	case obj.Spec.Remediation == nil || obj.Spec.PinnedDigest != "":
		return nil
	case !obj.KustomizationEnabled():
		r.markRemediated(obj, metav1.ConditionFalse, kclv1.RemediationUnavailableReason,
			"spec.remediation needs the generated Kustomization, and kustomization.disabled is set")
		return nil
	}
	if e := servedEntry(obj); e != nil && rejectionOf(rs, *e) != nil {
		// a rejected release still served: nothing was left to roll back to, and what the
		// rejections step said of it stands, healthy or not
		return nil
	}
	rv := remediation.Verdict{Health: v.health}
	if v.health == kclv1.HealthFailed {
		rv.HandledAt = live[v.failedAt].Status.LastHandledReconcileAt
	}
	action, st := remediation.Decide(obj, rv)
	obj.Status.Remediation = st
	switch action {
	case remediation.HealthyAfterRollback:
		r.markRemediated(obj, metav1.ConditionTrue, kclv1.RolledBackReason, "%s", remediation.RolledBackMessage(obj, remediation.RolledBack(obj))+"; it is healthy")
	case remediation.Forget:
		remediation.Clear(obj)
	case remediation.RollbackFailed:
		r.markRemediated(obj, metav1.ConditionFalse, kclv1.RollbackFailedReason,
			"the artifact rolled back to, %s, failed too (%s); nothing more is done until the inputs render another artifact or reconcile.fluxcd.io/resetAt is set",
			obj.Status.Artifact.Revision, remediation.FailureText(v.failure))
	case remediation.Retry:
		return r.retry(ctx, obj, live[v.failedAt])
	case remediation.RollBack:
		return r.rollBack(ctx, obj, v.failure, rs, sensitive)
	}
	return nil
}

// retry asks kustomize-controller to try the failed phase again; its answer is the next failure,
// or health.
func (r *KCLArtifactReconciler) retry(ctx context.Context, obj *kclv1.KCLArtifact, ks *kustomizev1.Kustomization) error {
	at, err := r.requestReconcile(ctx, ks)
	if err != nil {
		return err
	}
	st := obj.Status.Remediation
	st.RetryRequestedAt = at
	metrics.RemediationsTotal.WithLabelValues(obj.GetNamespace(), "retry").Inc()
	r.event(obj, eventWarning, retryingReason, fmt.Sprintf("artifact %s failed (%d of %d retries): asked Kustomization %s to try again",
		obj.Status.Artifact.Revision, st.Failures, obj.Spec.Remediation.Retries, ks.Name))
	return nil
}

// retryingReason is the reason of the event announcing a retry.
const retryingReason = "Retrying"

// rollBack publishes the newest healthy history entry again, of a release not rejected (rs) and
// not failed by its checks (spec.verify), and quarantines the failed artifact.
func (r *KCLArtifactReconciler) rollBack(ctx context.Context, obj *kclv1.KCLArtifact, failure *kclv1.ArtifactFailure, rs []promotion.Rejection, sensitive []string) error {
	failed := *obj.Status.Artifact
	target, ok := remediation.Target(obj, func(e kclv1.ArtifactHistoryEntry) bool {
		return r.Store.Keeps(obj, e) && rejectionOf(rs, e) == nil && !promotion.FailedVerification(e)
	})
	if !ok {
		if !conditions.HasAnyReason(obj, kclv1.RemediatedCondition, kclv1.NothingToRollBackToReason) {
			metrics.RemediationsTotal.WithLabelValues(obj.GetNamespace(), "none").Inc()
		}
		r.markRemediated(obj, metav1.ConditionFalse, kclv1.NothingToRollBackToReason,
			"artifact %s failed (%s) and no other history entry is healthy and in storage (historyLimit %d)",
			failed.Revision, remediation.FailureText(failure), obj.GetHistoryLimit())
		return nil
	}
	q := &kclv1.QuarantinedArtifact{
		Digest: failed.Digest, Revision: failed.Revision, SourceRevision: obj.Status.SourceRevision,
		TemplateDigest: remediation.TemplateDigest(obj), Failure: *failure, RolledBackTo: target.Digest, RolledBackAt: metav1.Now(),
	}
	// the quarantine is in place first: the phases of a rollback are read for it
	obj.Status.Remediation = &kclv1.RemediationStatus{Digest: target.Digest, Quarantined: q}
	if _, err := r.publishKept(obj, target, true); err != nil {
		obj.Status.Remediation = &kclv1.RemediationStatus{Digest: failed.Digest, Failures: obj.Spec.Remediation.Retries + 1}
		return err
	}
	obj.Status.Artifact.LastUpdateTime = q.RolledBackAt
	if _, err := r.publish(ctx, obj); err != nil {
		return err
	}
	recordHistory(obj, nil)
	markHealth(obj, verdict{health: kclv1.HealthProgressing}, true)
	r.markRemediated(obj, metav1.ConditionTrue, kclv1.RolledBackReason, "%s", remediation.RolledBackMessage(obj, q))
	r.announceRollback(obj, q, sensitive)
	metrics.RemediationsTotal.WithLabelValues(obj.GetNamespace(), "rollback").Inc()
	return nil
}

// announceRollback sends the RolledBack warning: what the rollback undid, the diff of the failed
// artifact to the one published again, and the failed source revision as the origin, so that a
// commit status marks the commit that failed. Objects named after sensitive values are masked,
// as in the new-artifact event.
func (r *KCLArtifactReconciler) announceRollback(obj *kclv1.KCLArtifact, q *kclv1.QuarantinedArtifact, sensitive []string) {
	msg := remediation.RolledBackMessage(obj, q)
	group := kclv1.GroupVersion.Group + "/"
	extra := map[string]string{group + eventv1.MetaOriginRevisionKey: q.SourceRevision}
	summary, diffURL := r.changeOf(obj, sensitive)
	if summary != "" {
		msg += "; undone: " + summary
	}
	if diffURL != "" {
		extra[group+diffURLKey] = diffURL
	}
	r.eventWith(obj, eventWarning, kclv1.RolledBackReason, msg, extra)
}

// markRemediated sets the Remediated condition; a new reason or message is announced.
func (r *KCLArtifactReconciler) markRemediated(obj *kclv1.KCLArtifact, status metav1.ConditionStatus, reason, format string, args ...any) {
	msg := clean(fmt.Sprintf(format, args...))
	before := conditions.Get(obj, kclv1.RemediatedCondition)
	conditions.Set(obj, &metav1.Condition{Type: kclv1.RemediatedCondition, Status: status, Reason: reason, Message: msg})
	if status == metav1.ConditionFalse && (before == nil || before.Reason != reason) {
		r.event(obj, eventWarning, reason, msg)
	}
}

// markRolledBack says in Ready that the KCLArtifact serves a rolled-back artifact: not what its
// inputs render, which failed.
func markRolledBack(obj *kclv1.KCLArtifact) {
	if q := remediation.RolledBack(obj); q != nil {
		summarize.NotReady(obj, kclv1.RolledBackReason, clean(remediation.RolledBackMessage(obj, q)))
	}
}
