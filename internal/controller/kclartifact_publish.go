package controller

import (
	"context"
	"fmt"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// publish points the ExternalArtifact at the current artifact and brings the generated
// Kustomization in line with the template (or removes it when generation is off).
func (r *KCLArtifactReconciler) publish(ctx context.Context, obj *kclv1.KCLArtifact, in *inputs) error {
	if err := r.publishExternalArtifact(ctx, obj); err != nil {
		return fail(kclv1.PublishFailedReason, err)
	}
	if !obj.KustomizationEnabled() {
		if err := r.deleteGenerated(ctx, obj, &kustomizev1.Kustomization{}); err != nil {
			return fail(kclv1.PublishFailedReason, err)
		}
		obj.Status.KustomizationRef = nil
		conditions.Delete(obj, kclv1.KustomizationReadyCondition)
		return nil
	}
	ks, err := r.publishKustomization(ctx, obj)
	if err != nil {
		return fail(kclv1.PublishFailedReason, err)
	}
	mirrorKustomization(obj, ks)
	return nil
}

func (r *KCLArtifactReconciler) publishExternalArtifact(ctx context.Context, obj *kclv1.KCLArtifact) error {
	ea := &sourcev1.ExternalArtifact{ObjectMeta: generatedMeta(obj)}
	if err := r.upsert(ctx, obj, ea, func() {
		ea.Spec.SourceRef = &meta.NamespacedObjectKindReference{
			APIVersion: kclv1.GroupVersion.String(), Kind: kclv1.KCLArtifactKind,
			Name: obj.GetName(), Namespace: obj.GetNamespace(),
		}
	}); err != nil {
		return err
	}
	obj.Status.ExternalArtifactRef = &meta.NamespacedObjectReference{Name: ea.Name, Namespace: ea.Namespace}
	want := ea.DeepCopy()
	want.Status.Artifact = obj.Status.Artifact.DeepCopy()
	conditions.MarkTrue(want, meta.ReadyCondition, meta.SucceededReason,
		"artifact %s rendered by KCLArtifact %s", want.Status.Artifact.Revision, obj.GetName())
	if equality.Semantic.DeepEqual(want.Status, ea.Status) {
		return nil
	}
	return r.Status().Update(ctx, want)
}

func (r *KCLArtifactReconciler) publishKustomization(ctx context.Context, obj *kclv1.KCLArtifact) (*kustomizev1.Kustomization, error) {
	ks := &kustomizev1.Kustomization{ObjectMeta: generatedMeta(obj)}
	if err := r.upsert(ctx, obj, ks, func() { ks.Spec = kustomizationSpec(obj) }); err != nil {
		return nil, err
	}
	obj.Status.KustomizationRef = &meta.NamespacedObjectReference{Name: ks.Name, Namespace: ks.Namespace}
	return ks, nil
}

// kustomizationSpec renders the template into a Kustomization spec applying the ExternalArtifact.
func kustomizationSpec(obj *kclv1.KCLArtifact) kustomizev1.KustomizationSpec {
	t := obj.Spec.Kustomization
	if t == nil {
		t = &kclv1.KustomizationTemplate{}
	}
	prune := true
	if t.Prune != nil {
		prune = *t.Prune
	}
	interval := obj.Spec.Interval
	if t.Interval != nil {
		interval = *t.Interval
	}
	return kustomizev1.KustomizationSpec{
		SourceRef: kustomizev1.CrossNamespaceSourceReference{
			Kind: sourcev1.ExternalArtifactKind, Name: obj.GetName(), Namespace: obj.GetNamespace(),
		},
		Path: "./", Interval: interval, RetryInterval: t.RetryInterval, Timeout: t.Timeout,
		Prune: prune, DeletionPolicy: t.DeletionPolicy, Wait: t.Wait, Force: t.Force,
		HealthChecks: t.HealthChecks, HealthCheckExprs: t.HealthCheckExprs,
		TargetNamespace: t.TargetNamespace, ServiceAccountName: t.ServiceAccountName,
		DependsOn: t.DependsOn, CommonMetadata: t.CommonMetadata, NamePrefix: t.NamePrefix,
		NameSuffix: t.NameSuffix, Patches: t.Patches, Images: t.Images, PostBuild: t.PostBuild,
		Decryption: t.Decryption, KubeConfig: t.KubeConfig, Suspend: false,
	}
}

// mirrorKustomization copies the Kustomization's readiness into KustomizationReady.
func mirrorKustomization(obj *kclv1.KCLArtifact, ks *kustomizev1.Kustomization) {
	ready := conditions.Get(ks, meta.ReadyCondition)
	if ready == nil || ks.Status.ObservedGeneration != ks.Generation {
		conditions.MarkUnknown(obj, kclv1.KustomizationReadyCondition, meta.ProgressingReason,
			"waiting for kustomize-controller to apply Kustomization %s", ks.Name)
		return
	}
	c := ready.DeepCopy()
	c.Type = kclv1.KustomizationReadyCondition
	c.ObservedGeneration = obj.Generation
	conditions.Set(obj, c)
}

// generatedLabel marks objects this controller generated, with the KCLArtifact's name.
const generatedLabel = "kcl.contrib.fluxcd.io/name"

func generatedMeta(obj *kclv1.KCLArtifact) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: obj.GetName(), Namespace: obj.GetNamespace()}
}

// upsert creates or updates a generated object, refusing to take over one it did not create.
func (r *KCLArtifactReconciler) upsert(ctx context.Context, owner *kclv1.KCLArtifact, o client.Object, mutate func()) error {
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, o, func() error {
		if created := o.GetCreationTimestamp(); !created.IsZero() && !metav1.IsControlledBy(o, owner) {
			return fmt.Errorf("%T %s/%s exists and is not managed by this KCLArtifact",
				o, o.GetNamespace(), o.GetName())
		}
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[generatedLabel] = owner.GetName()
		o.SetLabels(labels)
		mutate()
		return controllerutil.SetControllerReference(owner, o, r.Client.Scheme())
	})
	return err
}

// deleteGenerated deletes the generated object of o's type, if this KCLArtifact controls it.
func (r *KCLArtifactReconciler) deleteGenerated(ctx context.Context, owner *kclv1.KCLArtifact, o client.Object) error {
	err := r.Get(ctx, client.ObjectKey{Namespace: owner.GetNamespace(), Name: owner.GetName()}, o)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || !metav1.IsControlledBy(o, owner) {
		return err
	}
	return client.IgnoreNotFound(r.Delete(ctx, o))
}
