package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
)

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

// imageSelected passes an ImagePolicy's events that change what a render reads of it: the
// image selected, and whether the policy is Ready at its generation.
type imageSelected struct{ predicate.Funcs }

func (imageSelected) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*unstructured.Unstructured)
	n, okN := e.ObjectNew.(*unstructured.Unstructured)
	return !okO || !okN || !equality.Semantic.DeepEqual(arguments.ImagePolicyStateOf(o), arguments.ImagePolicyStateOf(n))
}

// exportsChanged passes a KCLArtifact's updates that change its exports.
type exportsChanged struct{ predicate.Funcs }

func (exportsChanged) Create(event.CreateEvent) bool { return false }
func (exportsChanged) Delete(event.DeleteEvent) bool { return false }

func (exportsChanged) Update(e event.UpdateEvent) bool {
	o, okO := e.ObjectOld.(*kclv1.KCLArtifact)
	n, okN := e.ObjectNew.(*kclv1.KCLArtifact)
	return okO && okN && !equality.Semantic.DeepEqual(o.Status.Exports, n.Status.Exports)
}
