package controller

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/fluxcd/pkg/runtime/predicates"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare/fairqueue"
	"github.com/kcl-flux/kcl-artifact-controller/internal/source"
)

const (
	// sourceIndex indexes KCLArtifacts by `<kind>/<namespace>/<name>` of their source.
	sourceIndex = ".metadata.sourceRef"
	// argumentsIndex indexes KCLArtifacts by `<kind>/<name>` of their argumentsFrom objects.
	argumentsIndex = ".metadata.argumentsFrom"
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
	return b.WithOptions(controller.Options{MaxConcurrentReconciles: opts.Concurrent, RateLimiter: opts.RateLimiter,
		NewQueue: fairqueue.New(opts.Concurrent, fairshare.Share(opts.Concurrent, opts.PerNamespace),
			func(req reconcile.Request) { r.running.cut(req.NamespacedName) })}).Complete(r)
}

func indexSource(o client.Object) []string {
	obj := o.(*kclv1.KCLArtifact)
	k := source.Key(obj)
	return []string{fmt.Sprintf("%s/%s/%s", obj.Spec.SourceRef.Kind, k.Namespace, k.Name)}
}

func indexArguments(o client.Object) []string {
	var keys []string
	for _, ref := range o.(*kclv1.KCLArtifact).Spec.ArgumentsFrom {
		keys = append(keys, arguments.IndexKey(ref))
	}
	return keys
}

func (r *KCLArtifactReconciler) forSource(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		key := fmt.Sprintf("%s/%s/%s", kind, o.GetNamespace(), o.GetName())
		return r.requestsFor(ctx, client.MatchingFields{sourceIndex: key})
	}
}

// forInput maps an input object of kind gk (a ConfigMap, a Secret, an ImagePolicy, an exporting
// KCLArtifact, an allowed kind) to the KCLArtifacts of its namespace that read it, through the index: an
// object nobody reads renders nothing.
func (r *KCLArtifactReconciler) forInput(gk schema.GroupKind) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.requestsFor(ctx, client.InNamespace(o.GetNamespace()),
			client.MatchingFields{argumentsIndex: arguments.ObjectIndexKey(gk, o.GetName())})
	}
}

func (r *KCLArtifactReconciler) requestsFor(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	var list kclv1.KCLArtifactList
	if err := r.List(ctx, &list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "listing KCLArtifacts for a watch event")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, it := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: it.Namespace, Name: it.Name}})
	}
	// The queue hands requests out in the order they are added, and the cache's index returns
	// them in no order. A render worker serves one namespace, and fewer are kept idle than there
	// may be namespaces on one source: queued in namespace order, a source's revision costs one
	// worker start per namespace instead of nearly one per KCLArtifact.
	slices.SortFunc(reqs, func(a, b reconcile.Request) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return reqs
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
