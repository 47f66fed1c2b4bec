package controller

import (
	"context"
	"fmt"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
)

// kustomize-controller checks a Kustomization's dependsOn again only every
// --requeue-dependency (30 s by default): a phase waiting on the one before it would start up to
// that long after it could. This controller watches every phase's Kustomization, so it asks for
// the next phase the moment the one before it is Ready at the artifact's revision, as
// `flux reconcile kustomization` does; kustomize-controller's own dependency check, read from the
// API server, still decides.

// advancePhases asks kustomize-controller to reconcile each phase that waits on its predecessor
// (DependencyNotReady) once that predecessor is Ready at the current revision: once per time the
// predecessor turned Ready, and never while an earlier request is still unhandled.
func (r *KCLArtifactReconciler) advancePhases(ctx context.Context, obj *kclv1.KCLArtifact, live []*kustomizev1.Kustomization) error {
	for i := 1; i < len(live) && i < len(obj.Status.Phases); i++ {
		next := live[i]
		if obj.Status.Phases[i-1].State != kclv1.PhaseReady || !waitingOnDependency(next) {
			r.advanced.forget(next.UID)
			continue
		}
		turn := readyTurn(obj, live[i-1])
		if r.advanced.asked(next.UID, turn) || requestPending(next) {
			continue
		}
		if _, err := r.requestReconcile(ctx, next); err != nil {
			return err
		}
		r.advanced.record(next.UID, turn)
	}
	return nil
}

// waitingOnDependency is a Kustomization that found a dependency not ready; a suspended one is
// left alone. Its observed generation is not asked for: kustomize-controller records it only on
// success, so a new Kustomization waiting on its first dependency shows none.
func waitingOnDependency(ks *kustomizev1.Kustomization) bool {
	return !ks.Spec.Suspend && conditions.GetReason(ks, meta.ReadyCondition) == meta.DependencyNotReadyReason
}

// readyTurn names one time a phase's Kustomization turned Ready at the artifact's revision:
// kustomize-controller sets Ready to Unknown while it reconciles, so each apply moves the
// condition's transition time.
func readyTurn(obj *kclv1.KCLArtifact, ks *kustomizev1.Kustomization) string {
	at := metav1.Time{}
	if c := conditions.Get(ks, meta.ReadyCondition); c != nil {
		at = c.LastTransitionTime
	}
	return fmt.Sprintf("%s@%s@%s", ks.UID, obj.Status.Artifact.Revision, at.UTC().Format(time.RFC3339))
}

// requestPending is a reconcile request (ours, or `flux reconcile`'s) kustomize-controller has not
// handled yet.
func requestPending(ks *kustomizev1.Kustomization) bool {
	v, ok := meta.ReconcileAnnotationValue(ks.GetAnnotations())
	return ok && v != ks.Status.LastHandledReconcileAt
}

// requestReconcile asks kustomize-controller to reconcile Kustomizations now, as
// `flux reconcile kustomization` does, and returns the request's token.
func (r *KCLArtifactReconciler) requestReconcile(ctx context.Context, kss ...*kustomizev1.Kustomization) (string, error) {
	at := time.Now().UTC().Format(time.RFC3339Nano)
	for _, ks := range kss {
		patch := client.MergeFrom(ks.DeepCopy())
		annotated := ks.DeepCopy()
		if annotated.Annotations == nil {
			annotated.Annotations = map[string]string{}
		}
		annotated.Annotations[meta.ReconcileRequestAnnotation] = at
		if err := r.Patch(ctx, annotated, patch); err != nil {
			return "", kreconcile.Fail(kclv1.PublishFailedReason, fmt.Errorf("asking Kustomization %s to reconcile: %w", ks.Name, err))
		}
	}
	return at, nil
}
