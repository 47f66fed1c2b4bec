package controller

import (
	"context"
	"strings"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/fluxcd/pkg/runtime/patch"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kerrors "k8s.io/apimachinery/pkg/util/errors"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

const (
	eventNormal  = corev1.EventTypeNormal
	eventWarning = corev1.EventTypeWarning
	// maxMessage bounds condition and event messages; KCL errors can be long.
	maxMessage = 4000
)

// ownedConditions are the condition types this controller writes on KCLArtifacts.
var ownedConditions = []string{meta.ReadyCondition, meta.ReconcilingCondition, meta.StalledCondition,
	kclv1.KustomizationReadyCondition}

func markProgressing(obj *kclv1.KCLArtifact) {
	conditions.Delete(obj, meta.StalledCondition)
	conditions.MarkReconciling(obj, meta.ProgressingReason, "reconciliation in progress")
	if !conditions.Has(obj, meta.ReadyCondition) {
		conditions.MarkUnknown(obj, meta.ReadyCondition, meta.ProgressingReason, "reconciliation in progress")
	}
}

func markReady(obj *kclv1.KCLArtifact, upToDate bool) {
	reason := kclv1.SucceededReason
	if upToDate {
		reason = kclv1.ArtifactUpToDateReason
	}
	conditions.Delete(obj, meta.ReconcilingCondition)
	conditions.Delete(obj, meta.StalledCondition)
	conditions.MarkTrue(obj, meta.ReadyCondition, reason, "stored artifact for revision '%s'", obj.Status.Artifact.Revision)
}

// markFailed reports a failed step. The message says what still serves when an older artifact does.
func markFailed(obj *kclv1.KCLArtifact, se *stepError) {
	msg := truncate(se.Error())
	if a := obj.Status.Artifact; a != nil {
		msg += "\n(still serving the last good artifact " + a.Revision + ")"
	}
	conditions.MarkFalse(obj, meta.ReadyCondition, se.reason, "%s", msg)
	if se.stalled {
		conditions.Delete(obj, meta.ReconcilingCondition)
		conditions.MarkStalled(obj, se.reason, "%s", msg)
		return
	}
	conditions.MarkReconciling(obj, meta.ProgressingWithRetryReason, "retrying after a failure: %s", se.reason)
}

func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage] + "\n... (truncated)"
}

// patchStatus writes finalizers, status and conditions at the end of a reconciliation; once the
// finalizer is removed the object may be gone, which the caller tolerates. ObservedGeneration moves only when the generation was fully handled.
func (r *KCLArtifactReconciler) patchStatus(ctx context.Context, obj *kclv1.KCLArtifact, patcher *patch.SerialPatcher, reconcileErr error) error {
	opts := []patch.Option{patch.WithOwnedConditions{Conditions: ownedConditions}, patch.WithFieldOwner(r.ControllerName)}
	if reconcileErr == nil && !conditions.IsReconciling(obj) {
		opts = append(opts, patch.WithStatusObservedGeneration{})
	}
	if obj.Spec.Suspend || conditions.IsStalled(obj) {
		opts = append(opts, patch.WithStatusObservedGeneration{})
	}
	err := patcher.Patch(ctx, obj, opts...)
	if !obj.GetDeletionTimestamp().IsZero() {
		// The finalizer is gone, and so may the object be: not an error. The patch error can
		// be an aggregate, which apierrors.IsNotFound does not see through.
		err = kerrors.FilterOut(err, apierrors.IsNotFound)
	}
	r.Metrics.RecordReadiness(ctx, obj)
	r.Metrics.RecordReconciling(ctx, obj)
	r.Metrics.RecordStalled(ctx, obj)
	return err
}

// event records an event; messages are KCL errors or revisions, never values or output.
func (r *KCLArtifactReconciler) event(obj *kclv1.KCLArtifact, eventType, reason, msg string) {
	annotations := map[string]string{}
	if obj.Status.Artifact != nil {
		annotations[kclv1.GroupVersion.Group+"/revision"] = obj.Status.Artifact.Revision
	}
	r.AnnotatedEventf(obj, annotations, eventType, reason, "%s", strings.TrimSpace(truncate(msg)))
}
