package controller

import (
	"context"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// upstreamIndex indexes stages by `<namespace>/<name>` of the KCLArtifact they follow.
const upstreamIndex = ".spec.promotion.from"

func indexUpstream(o client.Object) []string {
	obj := o.(*kclv1.KCLArtifact)
	if obj.Spec.Promotion != nil {
		return []string{upstreamKey(obj).String()}
	}
	return nil
}

// watchStages wakes a stage when its upstream's health or artifacts change (a soak starts, a
// failure closes a gate), when it appears or goes, when its consent to followers of other
// namespaces changes, and when the upstream starts following another stage (which may close a
// cycle through this one).
func (r *KCLArtifactReconciler) watchStages(b *builder.Builder) *builder.Builder {
	return b.Watches(&kclv1.KCLArtifact{}, handler.EnqueueRequestsFromMapFunc(r.stagesOf), builder.WithPredicates(upstreamChanged{}))
}

// stagesOf lists the stages that follow o, in any namespace.
func (r *KCLArtifactReconciler) stagesOf(ctx context.Context, o client.Object) []reconcile.Request {
	return r.requestsFor(ctx, client.MatchingFields{upstreamIndex: client.ObjectKeyFromObject(o).String()})
}

// upstreamChanged passes what a stage's gates read of its upstream: its history's artifacts and
// health, its quarantine, and its own spec.promotion.
type upstreamChanged struct{ predicate.Funcs }

func (upstreamChanged) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*kclv1.KCLArtifact)
	n, okN := e.ObjectNew.(*kclv1.KCLArtifact)
	if !okO || !okN {
		return false
	}
	return o.Generation != n.Generation || !slices.EqualFunc(o.Status.History, n.Status.History, sameProof) ||
		o.GetAnnotations()[kclv1.FollowersAnnotation] != n.GetAnnotations()[kclv1.FollowersAnnotation] ||
		quarantinedDigest(o) != quarantinedDigest(n)
}

func sameProof(a, b kclv1.ArtifactHistoryEntry) bool {
	return a.Digest == b.Digest && a.Health == b.Health && a.HealthyAt.Equal(b.HealthyAt) && a.SourceRevision == b.SourceRevision
}

func quarantinedDigest(o *kclv1.KCLArtifact) string {
	if r := o.Status.Remediation; r != nil && r.Quarantined != nil {
		return r.Quarantined.Digest
	}
	return ""
}

// approvalChanged passes a change of the approve annotations (kubectl annotate sets no
// reconcile request).
type approvalChanged struct{ predicate.Funcs }

func (approvalChanged) Create(event.CreateEvent) bool   { return false }
func (approvalChanged) Delete(event.DeleteEvent) bool   { return false }
func (approvalChanged) Generic(event.GenericEvent) bool { return false }

func (approvalChanged) Update(e event.UpdateEvent) bool {
	a, b := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
	return a[kclv1.ApproveAnnotation] != b[kclv1.ApproveAnnotation] || a[kclv1.ApprovedByAnnotation] != b[kclv1.ApprovedByAnnotation]
}
