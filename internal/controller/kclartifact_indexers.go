package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/source"
)

const (
	// sourceIndex indexes KCLArtifacts by `<kind>/<namespace>/<name>` of their source.
	sourceIndex = ".metadata.sourceRef"
	// argumentsIndex indexes KCLArtifacts by `<kind>/<name>` of their argumentsFrom objects.
	argumentsIndex = ".metadata.argumentsFrom"
)

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

// upstreamIndex indexes stages by `<namespace>/<name>` of the KCLArtifact they follow.
const upstreamIndex = ".spec.promotion.from"

func indexUpstream(o client.Object) []string {
	obj := o.(*kclv1.KCLArtifact)
	if obj.Spec.Promotion != nil {
		return []string{upstreamKey(obj).String()}
	}
	return nil
}

// stagesOf lists the stages that follow o, in any namespace.
func (r *KCLArtifactReconciler) stagesOf(ctx context.Context, o client.Object) []reconcile.Request {
	return r.requestsFor(ctx, client.MatchingFields{upstreamIndex: client.ObjectKeyFromObject(o).String()})
}

// exportersOf lists the KCLArtifacts whose exports o reads.
func exportersOf(_ context.Context, o client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	for _, ref := range o.(*kclv1.KCLArtifact).Spec.ArgumentsFrom {
		if arguments.ReadsExports(ref) && ref.Name != o.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: ref.Name}})
		}
	}
	return reqs
}

// stageIndex indexes the stages (KCLArtifacts with spec.promotion) under "true".
const stageIndex = ".spec.promotion.stage"

func indexStage(o client.Object) []string {
	if o.(*kclv1.KCLArtifact).Spec.Promotion != nil {
		return []string{"true"}
	}
	return nil
}

// stagesUnder lists the stages held by the line of namespace o: its own, or every stage when o
// is the controller's namespace.
func (r *KCLArtifactReconciler) stagesUnder(ctx context.Context, o client.Object) []reconcile.Request {
	opts := []client.ListOption{client.MatchingFields{stageIndex: "true"}}
	if o.GetName() != r.RuntimeNamespace {
		opts = append(opts, client.InNamespace(o.GetName()))
	}
	return r.requestsFor(ctx, opts...)
}
