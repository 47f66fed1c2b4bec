package controller

import (
	"context"
	"fmt"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kustomization"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
)

// orphanKustomization removes the generated Kustomization of a phase and leaves what it applied
// in place: turning generation off hands the objects to a Kustomization of the user's own, which
// adopts them, rather than deleting the workloads in between.
func (r *KCLArtifactReconciler) orphanKustomization(ctx context.Context, obj *kclv1.KCLArtifact, p phases.Phase) error {
	ks := &kustomizev1.Kustomization{}
	err := r.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: kustomization.Name(obj, p)}, ks)
	if apierrors.IsNotFound(err) || (err == nil && !metav1.IsControlledBy(ks, obj)) {
		return nil
	}
	if err != nil {
		return err
	}
	if !ks.GetDeletionTimestamp().IsZero() {
		return nil
	}
	if ks.Spec.DeletionPolicy != kustomizev1.DeletionPolicyOrphan {
		// kustomize-controller reads the policy when it finalizes the deleted object: set first.
		spec := phaseSpec(obj, p, phaseBefore(obj, p))
		spec.DeletionPolicy = kustomizev1.DeletionPolicyOrphan
		if _, err := apply(ctx, r, obj, &kustomizev1.Kustomization{ObjectMeta: generatedMetaNamed(obj, ks.Name), Spec: spec}); err != nil {
			return err
		}
	}
	r.applied.Forget(ks.UID)
	return client.IgnoreNotFound(r.Delete(ctx, ks))
}

// mirrorKustomization copies the Kustomization's readiness into KustomizationReady, as long as it
// is about the current artifact: a suspended or not yet updated Kustomization that applied an older
// one does not make the KCLArtifact look applied. kustomize-controller's progress reports are not
// copied: each would be a status write of the KCLArtifact saying nothing new (applied stays
// applied while reconciled again, applying says so until the outcome).
func mirrorKustomization(obj *kclv1.KCLArtifact, ks *kustomizev1.Kustomization) {
	ready := conditions.Get(ks, meta.ReadyCondition)
	want := ""
	if obj.Status.Artifact != nil {
		want = obj.Status.Artifact.Revision
	}
	applied := ks.Status.LastAppliedRevision == want
	switch {
	case ks.Spec.Suspend && !applied:
		conditions.MarkUnknown(obj, kclv1.KustomizationReadyCondition, kclv1.KustomizationSuspendedReason,
			"Kustomization %s is suspended (spec.kustomization.suspend): it last applied %q, not the current artifact",
			ks.Name, ks.Status.LastAppliedRevision)
	case inProgress(ready) && applied && ks.Status.ObservedGeneration == ks.Generation &&
		conditions.IsTrue(obj, kclv1.KustomizationReadyCondition):
		// applied, and reconciled again: applied until kustomize-controller says otherwise
	case !kustomizeObserved(ks, ready) || inProgress(ready) || (ready.Status == metav1.ConditionTrue && !applied):
		conditions.MarkUnknown(obj, kclv1.KustomizationReadyCondition, meta.ProgressingReason,
			"waiting for kustomize-controller to apply the current artifact with Kustomization %s", ks.Name)
	default:
		c := ready.DeepCopy()
		c.Type = kclv1.KustomizationReadyCondition
		c.ObservedGeneration = obj.Generation
		c.Message = withoutRevision(c.Message, want)
		conditions.Set(obj, c)
	}
}

// announceRefusal records a Warning event when the Kustomization newly fails (reason or message
// changed since before): what kustomize-controller refused, such as an object the impersonated
// account may not apply, reaches alerting as the KCLArtifact's, as a failed phase's does. Waiting
// for a dependency is no failure.
func (r *KCLArtifactReconciler) announceRefusal(obj *kclv1.KCLArtifact, before *metav1.Condition, ks *kustomizev1.Kustomization) {
	c := conditions.Get(obj, kclv1.KustomizationReadyCondition)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason == meta.DependencyNotReadyReason {
		return
	}
	if before != nil && before.Status == c.Status && before.Reason == c.Reason && before.Message == c.Message {
		return
	}
	r.event(obj, eventWarning, c.Reason, fmt.Sprintf("Kustomization %s/%s: %s", ks.Namespace, ks.Name, c.Message))
}
