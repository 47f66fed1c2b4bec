package controller

import (
	"context"
	"fmt"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/runtime/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
)

// reconcilePublish points the ExternalArtifact at the current artifact, brings the generated
// Kustomizations in line with it, and records it first in the history.
func (r *KCLArtifactReconciler) reconcilePublish(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	if obj.Status.Artifact == nil {
		return nil
	}
	ctx, cancel := bounded(ctx, r.Bounds.PublishTimeout)
	defer cancel()
	live, err := r.publish(ctx, obj)
	if err != nil {
		return err
	}
	p.live = live
	recordHistory(obj, p.record())
	if p.promoted != nil {
		obj.Status.History[0].Promotion = &p.promoted.record
	}
	return nil
}

// publish points the ExternalArtifact at the current artifact and brings the generated
// Kustomizations, one per deploy phase, in line with the template (or orphans them when
// generation is off). It returns the live Kustomizations in phase order. The Kustomizations of
// phases the artifact does not have are deleted before the ExternalArtifact moves: none of them
// applies a directory of the new artifact (a deploy's hooks in a rollback).
func (r *KCLArtifactReconciler) publish(ctx context.Context, obj *kclv1.KCLArtifact) ([]*kustomizev1.Kustomization, error) {
	if obj.KustomizationEnabled() {
		if err := r.deleteAbsentPhases(ctx, obj); err != nil {
			return nil, kreconcile.Fail(kclv1.PublishFailedReason, err)
		}
	}
	if err := r.publishExternalArtifact(ctx, obj); err != nil {
		return nil, kreconcile.Fail(kclv1.PublishFailedReason, err)
	}
	if !obj.KustomizationEnabled() {
		for _, p := range phases.Generated {
			if err := r.orphanKustomization(ctx, obj, p); err != nil {
				return nil, kreconcile.Fail(kclv1.PublishFailedReason, err)
			}
		}
		obj.Status.KustomizationRef, obj.Status.Phase = nil, ""
		for i := range obj.Status.Phases {
			obj.Status.Phases[i].State, obj.Status.Phases[i].Message = "", ""
		}
		conditions.Delete(obj, kclv1.KustomizationReadyCondition)
		return nil, nil
	}
	live, err := r.publishPhases(ctx, obj)
	if err != nil {
		return nil, kreconcile.Fail(kclv1.PublishFailedReason, err)
	}
	if len(obj.Status.Phases) == 0 {
		obj.Status.Phase = ""
		before := conditions.Get(obj, kclv1.KustomizationReadyCondition).DeepCopy()
		mirrorKustomization(obj, live[0])
		r.announceRefusal(obj, before, live[0])
		return live, nil
	}
	for _, s := range r.mirrorPhases(ctx, obj, live) {
		r.event(obj, eventWarning, kclv1.PhaseFailedReason,
			fmt.Sprintf("phase %s (Kustomization %s): %s", s.Name, s.Kustomization, s.Message))
	}
	if err := r.advancePhases(ctx, obj, live); err != nil {
		return nil, err
	}
	return live, nil
}

// keepPublished puts back what someone else changed of the generated objects when the pipeline
// fails before publishing: they keep applying the last good artifact as the KCLArtifact says,
// and breaking the render (deleting an argument's ConfigMap) does not leave a change of the
// Kustomization standing. Objects as the last apply left them cost nothing; phases are neither
// deleted nor advanced, which is the publish step's.
func (r *KCLArtifactReconciler) keepPublished(ctx context.Context, obj *kclv1.KCLArtifact, cause error) {
	if obj.Status.Artifact == nil || obj.Status.ExternalArtifactRef == nil || ctx.Err() != nil || fairshare.CutShort(ctx, cause) {
		return
	}
	r.Store.SetArtifactURL(obj, obj.Status.Artifact)
	publishCtx, cancel := bounded(ctx, r.Bounds.PublishTimeout)
	defer cancel()
	err := r.publishExternalArtifact(publishCtx, obj)
	if err == nil && obj.KustomizationEnabled() && obj.Status.KustomizationRef != nil {
		_, err = r.publishPhases(publishCtx, obj)
	}
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "keeping the generated objects as published")
	}
}
