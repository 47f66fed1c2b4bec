// Package summarize turns what the steps of a reconcile returned into the object's Ready,
// Reconciling and Stalled conditions and into what the work queue does next, as
// source-controller's internal/reconcile/summarize does: one place decides, whatever step failed.
package summarize

import (
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
)

// Progressing marks a reconcile under way; Ready stays what it was, or Unknown on a new object.
func Progressing(obj conditions.Setter) {
	conditions.Delete(obj, meta.StalledCondition)
	conditions.MarkReconciling(obj, meta.ProgressingReason, "reconciliation in progress")
	if !conditions.Has(obj, meta.ReadyCondition) {
		conditions.MarkUnknown(obj, meta.ReadyCondition, meta.ProgressingReason, "reconciliation in progress")
	}
}

// Ready marks a finished reconcile: Ready=True with reason and message, neither Reconciling nor
// Stalled.
func Ready(obj conditions.Setter, reason, msg string) {
	conditions.Delete(obj, meta.ReconcilingCondition)
	conditions.Delete(obj, meta.StalledCondition)
	conditions.MarkTrue(obj, meta.ReadyCondition, reason, "%s", msg)
}

// Unchanged marks a reconcile that found nothing new: Ready=True with reason, unless Ready
// already says msg, which then stays as it is, so that a reconcile that changed nothing writes
// nothing but the request it handled.
func Unchanged(obj conditions.Setter, reason, msg string) {
	if c := conditions.Get(obj, meta.ReadyCondition); c != nil && c.Status == metav1.ConditionTrue && c.Message == msg {
		reason = c.Reason
	}
	Ready(obj, reason, msg)
}

// NotReady marks a finished reconcile whose outcome is not ready yet (a gate that has not
// opened): Ready=False, neither Reconciling nor Stalled.
func NotReady(obj conditions.Setter, reason, msg string) {
	conditions.Delete(obj, meta.ReconcilingCondition)
	conditions.Delete(obj, meta.StalledCondition)
	conditions.MarkFalse(obj, meta.ReadyCondition, reason, "%s", msg)
}

// Failed marks a failed step: Ready=False with its reason and msg, and Stalled when only a new
// generation can help, else Reconciling with a retry.
func Failed(obj conditions.Setter, e *reconcile.Error, msg string) {
	conditions.MarkFalse(obj, meta.ReadyCondition, e.Reason, "%s", msg)
	if e.Stalled {
		conditions.Delete(obj, meta.ReconcilingCondition)
		conditions.MarkStalled(obj, e.Reason, "%s", msg)
		return
	}
	conditions.MarkReconciling(obj, meta.ProgressingWithRetryReason, "retrying after a failure: %s", e.Reason)
}

// FailureResult is what the queue does with a failed step: nothing more when stalled (the error
// is terminal), backoff when transient, else the retry after retry.
func FailureResult(e *reconcile.Error, retry time.Duration) (ctrl.Result, error) {
	switch {
	case e.Stalled:
		return ctrl.Result{}, ctrlreconcile.TerminalError(e)
	case e.Transient:
		return ctrl.Result{}, e
	}
	return ctrl.Result{RequeueAfter: retry}, nil
}

// Requeue says when a finished reconcile runs again: after Interval, or earlier when a gate
// opens by itself or a kept artifact's retention ends before that.
type Requeue struct {
	Interval time.Duration
	// GateOpens is when a closed promotion gate opens by itself (the end of a soak, a window):
	// the stage publishes as it opens, without polling.
	GateOpens time.Time
	// Collect is when an artifact no longer listed may be removed.
	Collect time.Time
	// Retry is when a step that failed without failing the reconcile (a push) tries again.
	Retry time.Time
}

// After is the requeue delay.
func (q Requeue) After() time.Duration {
	d := q.Interval
	if !q.Collect.IsZero() {
		d = min(d, max(time.Until(q.Collect), time.Second))
	}
	if !q.Retry.IsZero() {
		d = min(d, max(time.Until(q.Retry), time.Second))
	}
	return q.UntilGate(d)
}

// UntilGate is d, or less when the gate opens before it.
func (q Requeue) UntilGate(d time.Duration) time.Duration {
	if q.GateOpens.IsZero() {
		return d
	}
	return min(d, max(time.Until(q.GateOpens), 0)+100*time.Millisecond)
}
