package controller

import (
	"context"
	"fmt"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// finalize removes what the KCLArtifact produced: the generated Kustomization (whose own
// finalizer prunes what it applied, as for any deleted Kustomization), the ExternalArtifact and
// the stored artifacts. Owner references would do the first two with a garbage collector, but the
// artifacts on disk need this anyway, and explicit deletion does not depend on one running.
func (r *KCLArtifactReconciler) finalize(ctx context.Context, obj *kclv1.KCLArtifact) (ctrl.Result, error) {
	if err := r.deleteGenerated(ctx, obj, &kustomizev1.Kustomization{}); err != nil {
		return ctrl.Result{}, fmt.Errorf("deleting the generated Kustomization: %w", err)
	}
	if err := r.deleteGenerated(ctx, obj, &sourcev1.ExternalArtifact{}); err != nil {
		return ctrl.Result{}, fmt.Errorf("deleting the ExternalArtifact: %w", err)
	}
	if err := r.Store.RemoveAll(obj); err != nil {
		return ctrl.Result{}, fmt.Errorf("removing stored artifacts: %w", err)
	}
	controllerutil.RemoveFinalizer(obj, kclv1.Finalizer)
	return ctrl.Result{}, nil
}
