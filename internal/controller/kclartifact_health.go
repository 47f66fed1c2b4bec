package controller

import (
	"context"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
)

// reconcileHealth records the published artifact's health, as its Kustomizations say it, on
// its history entry; with spec.remediation, a failed artifact is retried, then rolled back.
func (r *KCLArtifactReconciler) reconcileHealth(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) (kreconcile.Result, error) {
	if obj.Status.Artifact == nil {
		return kreconcile.ResultEmpty, nil
	}
	ctx, cancel := bounded(ctx, r.Bounds.PublishTimeout)
	defer cancel()
	if p.retryAll {
		if err := r.retryAll(ctx, obj, p.live); err != nil {
			return kreconcile.ResultEmpty, err
		}
	}
	v := artifactVerdict(obj, p.live)
	markHealth(obj, v, false)
	if err := r.remediate(ctx, obj, p.live, v, p.sensitive()); err != nil {
		return kreconcile.ResultEmpty, err
	}
	return kreconcile.ResultSuccess, nil
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
