package controller

import (
	"context"
	"fmt"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kustomization"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
)

// finalize removes what the KCLArtifact produced: the generated Kustomization (whose own
// finalizer prunes what it applied, as for any deleted Kustomization), the ExternalArtifact and
// the stored artifacts. Owner references would do the first two with a garbage collector, but the
// artifacts on disk need this anyway, and explicit deletion does not depend on one running.
func (r *KCLArtifactReconciler) finalize(ctx context.Context, obj *kclv1.KCLArtifact) (ctrl.Result, error) {
	for _, p := range phases.Generated {
		if err := r.deleteGenerated(ctx, obj, &kustomizev1.Kustomization{}, kustomization.Name(obj, p)); err != nil {
			return ctrl.Result{}, fmt.Errorf("deleting the generated Kustomization: %w", err)
		}
	}
	if err := r.deleteGenerated(ctx, obj, externalArtifactMeta(), obj.GetName()); err != nil {
		return ctrl.Result{}, fmt.Errorf("deleting the ExternalArtifact: %w", err)
	}
	if err := r.Store.RemoveAll(obj); err != nil {
		return ctrl.Result{}, fmt.Errorf("removing stored artifacts: %w", err)
	}
	controllerutil.RemoveFinalizer(obj, kclv1.Finalizer)
	return ctrl.Result{}, nil
}

// deleteGenerated deletes the generated object of o's type and this name, if this
// KCLArtifact controls it.
func (r *KCLArtifactReconciler) deleteGenerated(ctx context.Context, owner *kclv1.KCLArtifact, o client.Object, name string) error {
	err := r.Get(ctx, client.ObjectKey{Namespace: owner.GetNamespace(), Name: name}, o)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || !metav1.IsControlledBy(o, owner) {
		return err
	}
	r.applied.Forget(o.GetUID())
	return client.IgnoreNotFound(r.Delete(ctx, o))
}
