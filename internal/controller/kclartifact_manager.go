package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/fluxcd/pkg/runtime/predicates"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/appliedcache"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare/fairqueue"
	"github.com/kcl-flux/kcl-artifact-controller/internal/source"
)

// Options of the controller.
type Options struct {
	Concurrent int
	// PerNamespace bounds the reconciles of one namespace running at once (default half of
	// Concurrent, at least one); namespaces waiting take turns.
	PerNamespace int
	RateLimiter  workqueue.TypedRateLimiter[reconcile.Request]
	// WatchConfigs selects the ConfigMaps and Secrets whose changes trigger the KCLArtifacts that
	// read arguments from them (Flux's reconcile.fluxcd.io/watch label by default); nil watches none.
	WatchConfigs predicate.Predicate
}

// SetupWithManager registers the indexes, watches and reconciler.
func (r *KCLArtifactReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &kclv1.KCLArtifact{}, sourceIndex, indexSource); err != nil {
		return fmt.Errorf("indexing sources: %w", err)
	}
	if err := idx.IndexField(ctx, &kclv1.KCLArtifact{}, argumentsIndex, indexArguments); err != nil {
		return fmt.Errorf("indexing argumentsFrom: %w", err)
	}
	if err := idx.IndexField(ctx, &kclv1.KCLArtifact{}, upstreamIndex, indexUpstream); err != nil {
		return fmt.Errorf("indexing spec.promotion.from: %w", err)
	}
	if err := idx.IndexField(ctx, &kclv1.KCLArtifact{}, stageIndex, indexStage); err != nil {
		return fmt.Errorf("indexing stages: %w", err)
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&kclv1.KCLArtifact{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicates.ReconcileRequestedPredicate{}, approvalChanged{}))).
		// ExternalArtifacts, generated or sources, are cached as their metadata only (the
		// publish and source reads say how their spec and status are read instead): a typed
		// read or watch of them anywhere would start a second informer holding them whole.
		Owns(&sourcev1.ExternalArtifact{}, builder.OnlyMetadata, builder.WithPredicates(foreignWrite{applied: &r.applied}, notCreated)).
		Owns(&kustomizev1.Kustomization{}, builder.WithPredicates(notCreated, kustomizationOutcome{})).
		Watches(&kclv1.KCLArtifact{}, r.cancelSuperseded())
	for _, kind := range []string{sourcev1.GitRepositoryKind, sourcev1.OCIRepositoryKind, sourcev1.BucketKind} {
		src, _ := source.New(kind)
		b = b.Watches(src, handler.EnqueueRequestsFromMapFunc(r.forSource(kind)),
			builder.WithPredicates(revisionChanged{}))
	}
	b = b.Watches(&sourcev1.ExternalArtifact{}, handler.EnqueueRequestsFromMapFunc(r.forSource(sourcev1.ExternalArtifactKind)),
		builder.OnlyMetadata, builder.WithPredicates(objectChanged{}))
	for kind, o := range map[string]client.Object{"ConfigMap": &corev1.ConfigMap{}, "Secret": &corev1.Secret{}} {
		if opts.WatchConfigs != nil {
			b = b.Watches(o, handler.EnqueueRequestsFromMapFunc(r.forInput(schema.GroupKind{Kind: kind})), builder.WithPredicates(opts.WatchConfigs))
		}
	}
	b = r.watchInputs(b)
	b = r.watchStages(b)
	b = r.watchLine(b)
	b = b.Watches(&kclv1.KCLArtifact{}, handler.EnqueueRequestsFromMapFunc(r.pipelineRequests), builder.WithPredicates(rejectedChanged{}))
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: opts.Concurrent, RateLimiter: opts.RateLimiter,
		NewQueue: fairqueue.New(opts.Concurrent, fairshare.Share(opts.Concurrent, opts.PerNamespace),
			func(req reconcile.Request) { r.running.cut(req.NamespacedName) })}).Complete(r)
}

// notCreated drops the creation of the objects we generate: we created them, and the owner's
// own events (its creation among them, on every start) cover it. A reconciliation right after
// ours would read our status before the cache saw it, and announce a "recovery" it misread.
var notCreated = predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }}

// kustomizationOutcome passes the updates of a generated Kustomization that a reconcile reads:
// its spec, labels and owner references (put back when someone else changed them), deletion,
// what it applied and attempted, the reconcile requests it handled, and its Ready condition.
// kustomize-controller writes a Kustomization's status several times per apply to report
// progress (the Reconciling and Healthy conditions, the inventory, the history); a reconcile of
// each would read them all to change nothing.
type kustomizationOutcome struct{ predicate.Funcs }

func (kustomizationOutcome) Update(e event.UpdateEvent) bool {
	o, okOld := e.ObjectOld.(*kustomizev1.Kustomization)
	n, okNew := e.ObjectNew.(*kustomizev1.Kustomization)
	if !okOld || !okNew {
		return true
	}
	return o.Generation != n.Generation || !o.DeletionTimestamp.Equal(n.DeletionTimestamp) ||
		!maps.Equal(o.Labels, n.Labels) || !equality.Semantic.DeepEqual(o.OwnerReferences, n.OwnerReferences) ||
		o.Spec.Suspend != n.Spec.Suspend || o.Status.ObservedGeneration != n.Status.ObservedGeneration ||
		o.Status.LastAppliedRevision != n.Status.LastAppliedRevision ||
		o.Status.LastAttemptedRevision != n.Status.LastAttemptedRevision ||
		o.Status.LastHandledReconcileAt != n.Status.LastHandledReconcileAt ||
		!equality.Semantic.DeepEqual(conditions.Get(o, meta.ReadyCondition), conditions.Get(n, meta.ReadyCondition))
}

// revisionChanged passes source events whose artifact revision changed.
type revisionChanged struct{ predicate.Funcs }

func (revisionChanged) Create(e event.CreateEvent) bool { return artifactOf(e.Object) != nil }
func (revisionChanged) Delete(event.DeleteEvent) bool   { return false }
func (revisionChanged) Generic(event.GenericEvent) bool { return false }

func (revisionChanged) Update(e event.UpdateEvent) bool {
	newA := artifactOf(e.ObjectNew)
	if newA == nil {
		return false
	}
	oldA := artifactOf(e.ObjectOld)
	return oldA == nil || oldA.Revision != newA.Revision || oldA.Digest != newA.Digest || oldA.URL != newA.URL
}

// objectChanged passes the creation of an ExternalArtifact and its updates that changed it (its
// resourceVersion moved; not the informer's resyncs): its status is not cached, and an
// ExternalArtifact changes when its producer writes it, mostly its artifact. A change that left
// the artifact as it was costs its readers a reconcile that finds their input digest unchanged.
type objectChanged struct{ predicate.Funcs }

func (objectChanged) Delete(event.DeleteEvent) bool   { return false }
func (objectChanged) Generic(event.GenericEvent) bool { return false }

func (objectChanged) Update(e event.UpdateEvent) bool {
	return e.ObjectOld.GetResourceVersion() != e.ObjectNew.GetResourceVersion()
}

func artifactOf(o client.Object) *meta.Artifact {
	if s, ok := o.(source.Source); ok {
		return s.GetArtifact()
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

// watchLine wakes the stages of a namespace whose line is stopped or resumed
// (kcl.contrib.fluxcd.io/stop-the-line), every stage for the controller's own namespace.
// Namespaces are cached as their metadata only.
func (r *KCLArtifactReconciler) watchLine(b *builder.Builder) *builder.Builder {
	return b.Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.stagesUnder), builder.OnlyMetadata,
		builder.WithPredicates(lineChanged{}))
}

// lineChanged passes a change of a namespace's stop-the-line annotations.
type lineChanged struct{ predicate.Funcs }

func (lineChanged) Create(event.CreateEvent) bool   { return false }
func (lineChanged) Delete(event.DeleteEvent) bool   { return false }
func (lineChanged) Generic(event.GenericEvent) bool { return false }

func (lineChanged) Update(e event.UpdateEvent) bool {
	a, b := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
	for _, k := range []string{kclv1.StopTheLineAnnotation, kclv1.StoppedByAnnotation, kclv1.StoppedAtAnnotation} {
		if a[k] != b[k] {
			return true
		}
	}
	return false
}

// upstreamChanged passes what a stage's gates read of its upstream: its history's artifacts and
// health, its quarantine, and its own spec.promotion.
type upstreamChanged struct{ predicate.Funcs }

func sameProof(a, b kclv1.ArtifactHistoryEntry) bool {
	return a.Digest == b.Digest && a.Health == b.Health && a.HealthyAt.Equal(b.HealthyAt) && a.SourceRevision == b.SourceRevision &&
		verificationResult(a) == verificationResult(b)
}

func verificationResult(e kclv1.ArtifactHistoryEntry) string {
	if e.Verification == nil {
		return ""
	}
	return e.Verification.Result
}

func quarantinedDigest(o *kclv1.KCLArtifact) string {
	if r := o.Status.Remediation; r != nil && r.Quarantined != nil {
		return r.Quarantined.Digest
	}
	return ""
}

// approvalChanged passes a change of the approve, exemption and reject annotations (kubectl
// annotate sets no reconcile request).
type approvalChanged struct{ predicate.Funcs }

// rejectedChanged passes a change of the releases a KCLArtifact rejects (status.rejected), which
// every KCLArtifact of its pipeline reads (pipelineRequests).
type rejectedChanged struct{ predicate.Funcs }

func (rejectedChanged) Create(e event.CreateEvent) bool {
	return len(e.Object.(*kclv1.KCLArtifact).Status.Rejected) > 0
}
func (rejectedChanged) Delete(e event.DeleteEvent) bool {
	return len(e.Object.(*kclv1.KCLArtifact).Status.Rejected) > 0
}
func (rejectedChanged) Generic(event.GenericEvent) bool { return false }

func (rejectedChanged) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*kclv1.KCLArtifact)
	n, okN := e.ObjectNew.(*kclv1.KCLArtifact)
	return okO && okN && !equality.Semantic.DeepEqual(o.Status.Rejected, n.Status.Rejected)
}

// watchInputs watches the inputs argumentsFrom reads besides ConfigMaps and Secrets: the
// ImagePolicies (when served), the exports of KCLArtifacts and the kinds the operator allows.
// Each event goes through the index to the KCLArtifacts that read the object, only when what
// they read may have changed.
func (r *KCLArtifactReconciler) watchInputs(b *builder.Builder) *builder.Builder {
	if !r.NoImagePolicies {
		b = b.Watches(unstructuredOf(arguments.ImagePolicy), handler.EnqueueRequestsFromMapFunc(r.forInput(arguments.ImagePolicy.GroupKind())),
			builder.WithPredicates(imageSelected{}))
	}
	b = b.Watches(&kclv1.KCLArtifact{}, handler.EnqueueRequestsFromMapFunc(r.forInput(kclv1.GroupVersion.WithKind(kclv1.KCLArtifactKind).GroupKind())),
		builder.WithPredicates(exportsChanged{}))
	// a KCLArtifact that starts reading another's exports may close a cycle: the one it reads
	// looks again, and each member of the cycle says so
	b = b.Watches(&kclv1.KCLArtifact{}, handler.EnqueueRequestsFromMapFunc(exportersOf),
		builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	for _, gvk := range r.ArgumentKinds.List() {
		b = b.Watches(unstructuredOf(gvk), handler.EnqueueRequestsFromMapFunc(r.forInput(gvk.GroupKind())),
			builder.WithPredicates(predicate.ResourceVersionChangedPredicate{}))
	}
	return b
}

func unstructuredOf(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

// imageSelected passes an ImagePolicy's events that change what a render reads of it: the
// image selected, and whether the policy is Ready at its generation.
type imageSelected struct{ predicate.Funcs }

// exportsChanged passes a KCLArtifact's updates that change its exports.
type exportsChanged struct{ predicate.Funcs }

// foreignWrite passes the updates of a generated ExternalArtifact this controller did not write
// (nor read: a status write by someone else it already saw): its status is not cached, so a
// status written by someone else shows only as a resourceVersion that is not the controller's,
// and so do its labels and owner references, which move no generation.
type foreignWrite struct {
	predicate.Funcs
	applied *appliedcache.Cache
}

// cancelSuperseded is the watch that cancels a reconcile in flight when its KCLArtifact is
// deleted or suspended; it queues nothing (the For watch does).
func (r *KCLArtifactReconciler) cancelSuperseded() handler.EventHandler {
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if superseded(e.ObjectNew) {
				r.running.cancel(client.ObjectKeyFromObject(e.ObjectNew))
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.running.cancel(client.ObjectKeyFromObject(e.Object))
		},
	}
}

func superseded(o client.Object) bool {
	obj, ok := o.(*kclv1.KCLArtifact)
	return ok && (obj.Spec.Suspend || !obj.GetDeletionTimestamp().IsZero())
}

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

func (approvalChanged) Create(event.CreateEvent) bool   { return false }
func (approvalChanged) Delete(event.DeleteEvent) bool   { return false }
func (approvalChanged) Generic(event.GenericEvent) bool { return false }

func (approvalChanged) Update(e event.UpdateEvent) bool {
	a, b := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
	for _, k := range []string{kclv1.ApproveAnnotation, kclv1.ApprovedByAnnotation, kclv1.ExemptionAnnotation,
		kclv1.RejectAnnotation, kclv1.RejectedByAnnotation, kclv1.RejectReasonAnnotation} {
		if a[k] != b[k] {
			return true
		}
	}
	return false
}

func (imageSelected) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*unstructured.Unstructured)
	n, okN := e.ObjectNew.(*unstructured.Unstructured)
	return !okO || !okN || !equality.Semantic.DeepEqual(arguments.ImagePolicyStateOf(o), arguments.ImagePolicyStateOf(n))
}

func (exportsChanged) Create(event.CreateEvent) bool { return false }
func (exportsChanged) Delete(event.DeleteEvent) bool { return false }

func (exportsChanged) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*kclv1.KCLArtifact)
	n, okN := e.ObjectNew.(*kclv1.KCLArtifact)
	return okO && okN && !equality.Semantic.DeepEqual(o.Status.Exports, n.Status.Exports)
}

func (p foreignWrite) Update(e event.UpdateEvent) bool {
	n := e.ObjectNew
	if e.ObjectOld.GetResourceVersion() == n.GetResourceVersion() {
		return false // a resync
	}
	_, ours := p.applied.StatusAt(n.GetUID(), n.GetResourceVersion())
	return !ours
}
