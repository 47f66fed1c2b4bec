package controller

import (
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// kustomizeReady is a Kustomization kustomize-controller reported Ready at rev.
func kustomizeReady(rev string) *kustomizev1.Kustomization {
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns", Generation: 1}}
	ks.Status.ObservedGeneration, ks.Status.LastAppliedRevision, ks.Status.LastAttemptedRevision = 1, rev, rev
	conditions.MarkTrue(ks, meta.ReadyCondition, meta.ReconciliationSucceededReason, "Applied revision: %s", rev)
	return ks
}

// reconciling is what kustomize-controller writes when it starts reconciling ks again.
func reconciling(ks *kustomizev1.Kustomization, step string) *kustomizev1.Kustomization {
	ks = ks.DeepCopy()
	conditions.MarkUnknown(ks, meta.ReadyCondition, meta.ProgressingReason, "Reconciliation in progress")
	conditions.MarkReconciling(ks, meta.ProgressingReason, "%s", step)
	return ks
}

func publishedAt(rev string) *kclv1.KCLArtifact {
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns", Generation: 1}}
	obj.Status.Artifact = &meta.Artifact{Revision: rev}
	return obj
}

// kustomize-controller's progress reports change neither KustomizationReady nor a phase's state:
// each would be a status write of the KCLArtifact saying nothing new.
func TestKustomizeProgressIsNotMirrored(t *testing.T) {
	obj := publishedAt("r1")
	mirrorKustomization(obj, kustomizeReady("r1"))
	applied := *conditions.Get(obj, kclv1.KustomizationReadyCondition)
	if applied.Status != metav1.ConditionTrue {
		t.Fatalf("not mirrored: %+v", applied)
	}
	mirrorKustomization(obj, reconciling(kustomizeReady("r1"), "Detecting drift"))
	if got := *conditions.Get(obj, kclv1.KustomizationReadyCondition); got != applied {
		t.Errorf("an applied artifact reconciled again changed KustomizationReady: %+v -> %+v", applied, got)
	}
	if state, _ := phaseState(obj, reconciling(kustomizeReady("r1"), "Detecting drift"), true); state != kclv1.PhaseReady {
		t.Errorf("an applied phase reconciled again is %s", state)
	}

	// a new artifact: waiting until kustomize-controller says how it went, whatever its steps
	obj.Status.Artifact.Revision = "r2"
	mirrorKustomization(obj, kustomizeReady("r1"))
	waiting := *conditions.Get(obj, kclv1.KustomizationReadyCondition)
	state, msg := phaseState(obj, kustomizeReady("r1"), true)
	for _, step := range []string{"Fetching manifests", "Building manifests", "Running health checks"} {
		ks := reconciling(kustomizeReady("r1"), step)
		ks.Status.LastAttemptedRevision = "r2"
		mirrorKustomization(obj, ks)
		if got := *conditions.Get(obj, kclv1.KustomizationReadyCondition); got != waiting {
			t.Errorf("%s: KustomizationReady %+v -> %+v", step, waiting, got)
		}
		if s, m := phaseState(obj, ks, true); s != state || m != msg {
			t.Errorf("%s: phase state %s %q -> %s %q", step, state, msg, s, m)
		}
	}
	mirrorKustomization(obj, kustomizeReady("r2"))
	if !conditions.IsTrue(obj, kclv1.KustomizationReadyCondition) {
		t.Errorf("the new artifact applied is not mirrored: %+v", conditions.Get(obj, kclv1.KustomizationReadyCondition))
	}
}

// An artifact whose health check failed after it was applied (a later reconcile of the same
// revision) is not made healthy by kustomize-controller trying again: only an applied artifact
// stays applied while reconciled again. Otherwise a remediation retry would read as a recovery and
// the failures would never add up to a rollback.
func TestReconcilingAFailureIsNoRecovery(t *testing.T) {
	obj := publishedAt("r1")
	failed := kustomizeReady("r1")
	conditions.MarkFalse(failed, meta.ReadyCondition, meta.HealthCheckFailedReason, "health check failed")
	mirrorKustomization(obj, failed)
	if !conditions.IsFalse(obj, kclv1.KustomizationReadyCondition) {
		t.Fatalf("the failure is not mirrored: %+v", conditions.Get(obj, kclv1.KustomizationReadyCondition))
	}
	if state, _ := phaseState(obj, failed, false); state != kclv1.PhaseFailed {
		t.Fatalf("the failed phase is %s", state)
	}
	retrying := reconciling(failed, "Running health checks")
	mirrorKustomization(obj, retrying)
	if conditions.IsTrue(obj, kclv1.KustomizationReadyCondition) {
		t.Errorf("a retry of a failed artifact made KustomizationReady True: %+v", conditions.Get(obj, kclv1.KustomizationReadyCondition))
	}
	if state, _ := phaseState(obj, retrying, false); state == kclv1.PhaseReady {
		t.Errorf("a retry of a failed phase made it %s", state)
	}
	obj.Status.Phases = nil
	if v := artifactVerdict(obj, []*kustomizev1.Kustomization{retrying}); v.health == kclv1.HealthHealthy {
		t.Errorf("a retry of a failed artifact reads as healthy")
	}
}

// Only the Kustomization updates a reconcile reads wake the KCLArtifact.
func TestKustomizationOutcomeEvents(t *testing.T) {
	before := reconciling(kustomizeReady("r1"), "Fetching manifests")
	for name, tc := range map[string]struct {
		change func(*kustomizev1.Kustomization)
		want   bool
	}{
		"progress message": {func(ks *kustomizev1.Kustomization) {
			conditions.MarkReconciling(ks, meta.ProgressingReason, "Detecting drift")
		}, false},
		"inventory": {func(ks *kustomizev1.Kustomization) { ks.Status.Inventory = &kustomizev1.ResourceInventory{} }, false},
		"healthy": {func(ks *kustomizev1.Kustomization) {
			conditions.MarkTrue(ks, meta.HealthyCondition, meta.SucceededReason, "Health check passed")
		}, false},
		"ready": {func(ks *kustomizev1.Kustomization) {
			conditions.MarkTrue(ks, meta.ReadyCondition, meta.ReconciliationSucceededReason, "Applied revision: r2")
		}, true},
		"attempted":  {func(ks *kustomizev1.Kustomization) { ks.Status.LastAttemptedRevision = "r2" }, true},
		"applied":    {func(ks *kustomizev1.Kustomization) { ks.Status.LastAppliedRevision = "r2" }, true},
		"handled":    {func(ks *kustomizev1.Kustomization) { ks.Status.LastHandledReconcileAt = "now" }, true},
		"suspended":  {func(ks *kustomizev1.Kustomization) { ks.Spec.Suspend = true }, true},
		"generation": {func(ks *kustomizev1.Kustomization) { ks.Generation++ }, true},
		"observed":   {func(ks *kustomizev1.Kustomization) { ks.Status.ObservedGeneration++ }, true},
		"labels":     {func(ks *kustomizev1.Kustomization) { ks.Labels = map[string]string{"a": "b"} }, true},
		"deletion":   {func(ks *kustomizev1.Kustomization) { now := metav1.Now(); ks.DeletionTimestamp = &now }, true},
	} {
		after := before.DeepCopy()
		tc.change(after)
		if got := (kustomizationOutcome{}).Update(event.UpdateEvent{ObjectOld: before, ObjectNew: after}); got != tc.want {
			t.Errorf("%s: reconcile %v, want %v", name, got, tc.want)
		}
	}
}
