package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/jitter"
	ctrl "sigs.k8s.io/controller-runtime"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputchange"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
	"github.com/kcl-flux/kcl-artifact-controller/internal/reconcile/summarize"
	"github.com/kcl-flux/kcl-artifact-controller/internal/remediation"
)

// summarize turns the outcome of the steps into conditions, events and the requeue.
func (r *KCLArtifactReconciler) summarize(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline, err error) (ctrl.Result, error) {
	if err != nil {
		if p.failedStep.keepsPublished {
			r.keepPublished(ctx, obj, err)
		}
		return r.failed(ctx, obj, err)
	}
	// a failed render still comes back for what waits on a clock: a gate, the checks, a push
	gate := summarize.Requeue{GateOpens: p.promoteAt, Retry: p.retryAt}
	if obj.Status.Artifact == nil {
		// a stage whose first artifact waits: nothing published yet
		if p.renderErr != nil {
			return r.renderFailed(ctx, obj, p.renderErr, gate)
		}
		markWaitingFirst(obj)
		return ctrl.Result{RequeueAfter: gate.UntilGate(r.Bounds.interval(obj))}, nil
	}
	switch {
	case p.pinned:
		markPinned(obj)
	case remediation.RolledBack(obj) != nil:
		markRolledBack(obj)
	default:
		markReady(obj, p.upToDate)
	}
	if p.renderErr != nil {
		// what waited was promoted; the render's failure is still the news
		r.announce(obj, p, false)
		return r.renderFailed(ctx, obj, p.renderErr, gate)
	}
	r.announce(obj, p, p.wasFailing)
	r.failures.reset(obj)
	return ctrl.Result{RequeueAfter: summarize.Requeue{Interval: jitter.JitteredIntervalDuration(r.Bounds.interval(obj)),
		GateOpens: p.promoteAt, Collect: p.collectAt, Retry: p.retryAt}.After()}, nil
}

// renderFailed reports a stage's failed render; the retry comes no later than its gate opens, or
// than a step's own retry (the next run of the checks, a push).
func (r *KCLArtifactReconciler) renderFailed(ctx context.Context, obj *kclv1.KCLArtifact, renderErr error, gate summarize.Requeue) (ctrl.Result, error) {
	res, err := r.failed(ctx, obj, renderErr)
	if res.RequeueAfter > 0 {
		res.RequeueAfter = gate.UntilGate(res.RequeueAfter)
		if !gate.Retry.IsZero() {
			res.RequeueAfter = min(res.RequeueAfter, max(time.Until(gate.Retry), time.Second))
		}
	}
	return res, err
}

// failed records a failed step: Ready=False with the reason, Stalled when retrying cannot help.
// Transient API errors go back to the queue with backoff; the others wait for the retry interval
// or for a change of their inputs.
func (r *KCLArtifactReconciler) failed(ctx context.Context, obj *kclv1.KCLArtifact, err error) (ctrl.Result, error) {
	if errors.Is(context.Cause(ctx), errSuperseded) {
		// The reconcile that follows says what became of it. It is asked for here as well: the
		// cancelling event may have been an old one, delivered after a resumption.
		ctrl.LoggerFrom(ctx).Info("reconciliation cancelled: the KCLArtifact was deleted or suspended")
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if fairshare.CutShort(ctx, err) {
		// Not a failure of the object's: its namespace held the fast lane past the slice and is
		// now kept out of it; the work goes on in an ordinary place at once, conditions as they were.
		ctrl.LoggerFrom(ctx).Info("reconciliation cut short by the fair share: trying again in an ordinary place", "error", err.Error())
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	se := kreconcile.As(err)
	markFailed(obj, se)
	if se.Reason == kclv1.SourceNotReadyReason {
		// Expected while source-controller produces its first artifact: nobody is paged for it.
		ctrl.LoggerFrom(ctx).Info("waiting for the source", "reason", se.Reason, "message", se.Error())
	} else {
		r.event(obj, eventWarning, se.Reason, se.Error())
		ctrl.LoggerFrom(ctx).Error(se.Err, "reconciliation failed", "reason", se.Reason)
	}
	var retry time.Duration
	if !se.Stalled && !se.Transient {
		retry = r.Bounds.retry(obj, r.failures.add(obj))
	}
	return summarize.FailureResult(se, retry)
}

// announce tells alerting what a successful reconciliation changed: a new artifact, or a recovery
// from a failure when the output stayed the same (no new artifact would say so otherwise).
func (r *KCLArtifactReconciler) announce(obj *kclv1.KCLArtifact, p *pipeline, wasFailing bool) {
	a, published, sensitive := obj.Status.Artifact, p.published, p.sensitive()
	switch {
	case published && p.pinned:
		r.event(obj, eventNormal, kclv1.PinnedReason,
			fmt.Sprintf("publishing the pinned artifact %s rendered from %s", a.Revision, obj.Status.SourceRevision))
	case published && p.promoted != nil:
		_, diffURL := r.changeOf(obj, sensitive)
		var extra map[string]string
		if diffURL != "" {
			extra = map[string]string{kclv1.GroupVersion.Group + "/" + diffURLKey: diffURL}
		}
		r.eventWith(obj, eventNormal, kclv1.PromotedReason, promotionMessage(obj, p.promoted, sensitive), extra)
	case published:
		msg := fmt.Sprintf("stored artifact %s rendered from %s", a.Revision, obj.Status.SourceRevision)
		if h := obj.Status.History; len(h) > 1 && h[0].Digest == a.Digest {
			if changes := inputchange.Changes(h[1].Inputs, h[0].Inputs); len(changes) > 0 {
				// an input that copies a Secret's value (a ConfigMap holding it) is masked too
				for i := range changes {
					changes[i] = changes[i].Mask(sensitive)
				}
				msg += " with " + inputchange.Text(changes, 5)
			}
		}
		summary, diffURL := r.changeOf(obj, sensitive)
		if summary != "" {
			msg += ": " + summary
		}
		var extra map[string]string
		if diffURL != "" {
			extra = map[string]string{kclv1.GroupVersion.Group + "/" + diffURLKey: diffURL}
		}
		r.eventWith(obj, eventNormal, newArtifactReason, msg, extra)
	case wasFailing:
		r.event(obj, eventNormal, meta.SucceededReason,
			fmt.Sprintf("recovered: serving artifact %s rendered from %s", a.Revision, obj.Status.SourceRevision))
	}
}

// newArtifactReason is the reason of the event announcing a new artifact, source-controller's:
// its API module names it sourcev1.NewArtifactReason from v1.10, which needs Go 1.27; this
// module is on v1.9.6 (Flux 2.9), which has no constant for it.
const newArtifactReason = "NewArtifact"
