// Package cachestrip sets the transforms of the controller's informer cache: each kind keeps
// what the controller, the artifact server and the UI read of it, and nothing else.
package cachestrip

import (
	"reflect"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// The informer cache holds every Kustomization and source of the cluster, and a KCLArtifact with
// its generated objects per application: at 10,000 applications it was most of the controller's
// memory. Managed fields and kubectl's last-applied annotation (a copy of the whole object)
// go for every kind; what a reader needs and the cache does not keep, it reads from the API
// server (the APIReader), as reclaim does for managed fields. ExternalArtifacts are not
// decoded whole at all: the controller watches their metadata only (builder.OnlyMetadata), remembers
// what it last wrote to the status of those it generates, and reads an ExternalArtifact source
// from the API server.

// transforms are the transforms of the kinds that keep less than their metadata and status.
var transforms = []struct {
	obj       ctrlclient.Object
	transform toolscache.TransformFunc
}{
	// its status is the base of every status patch: the object is kept whole
	{&kclv1.KCLArtifact{}, stripMetadata},
	// cached as metadata only; options are per kind, so this is its metadata informer's transform
	{&sourcev1.ExternalArtifact{}, stripMetadata},
	{&kustomizev1.Kustomization{}, transformOf(stripKustomization)},
	{&sourcev1.GitRepository{}, transformOf(stripGitRepository)},
	{&sourcev1.OCIRepository{}, transformOf(stripOCIRepository)},
	{&sourcev1.Bucket{}, transformOf(stripBucket)},
}

// Set sets the transforms on the cache's options by object, keeping the label selectors already
// set there. Kinds not listed keep the cache's default transform.
func Set(byObject map[ctrlclient.Object]ctrlcache.ByObject) {
	for _, t := range transforms {
		key := keyOfType(byObject, t.obj)
		c := byObject[key]
		c.Transform = t.transform
		byObject[key] = c
	}
}

// keyOfType is the key of byObject for o's type, or o when there is none: the map's keys are
// pointers, and two entries for one type would be two informers.
func keyOfType(byObject map[ctrlclient.Object]ctrlcache.ByObject, o ctrlclient.Object) ctrlclient.Object {
	for k := range byObject {
		if reflect.TypeOf(k) == reflect.TypeOf(o) {
			return k
		}
	}
	return o
}

// stripMetadata drops the managed fields and kubectl's last-applied annotation: nothing reads
// them from the cache.
func stripMetadata(in any) (any, error) {
	o, err := meta.Accessor(in)
	if err != nil {
		// a tombstone (DeletedFinalStateUnknown) or something else that is not an object
		return in, nil
	}
	// nil only when set: kubernetes/kubernetes#124337
	if o.GetManagedFields() != nil {
		o.SetManagedFields(nil)
	}
	if a := o.GetAnnotations(); a != nil {
		if _, ok := a[corev1.LastAppliedConfigAnnotation]; ok {
			delete(a, corev1.LastAppliedConfigAnnotation)
			if len(a) == 0 {
				o.SetAnnotations(nil)
			}
		}
	}
	return in, nil
}

// transformOf is a transform that strips the metadata and then applies strip to objects of T.
func transformOf[T ctrlclient.Object](strip func(T)) toolscache.TransformFunc {
	return func(in any) (any, error) {
		out, err := stripMetadata(in)
		if o, ok := out.(T); ok && err == nil {
			strip(o)
		}
		return out, err
	}
}

// stripKustomization keeps what the controller reads of a generated Kustomization (publish,
// phases, health, remediation, finalize): its metadata, spec.suspend, spec.kubeConfig and
// spec.deletionPolicy, and the status but for the inventory and history, which kustomize-
// controller keeps for itself and which grow with every object applied.
func stripKustomization(ks *kustomizev1.Kustomization) {
	ks.Spec = kustomizev1.KustomizationSpec{Suspend: ks.Spec.Suspend, KubeConfig: ks.Spec.KubeConfig,
		DeletionPolicy: ks.Spec.DeletionPolicy}
	ks.Status = kustomizev1.KustomizationStatus{
		ObservedGeneration: ks.Status.ObservedGeneration, Conditions: ks.Status.Conditions,
		LastAppliedRevision: ks.Status.LastAppliedRevision, LastAttemptedRevision: ks.Status.LastAttemptedRevision,
		ReconcileRequestStatus: ks.Status.ReconcileRequestStatus,
	}
}

// The sources are read for their artifact (source.Get, the revisionChanged predicate) and their
// address (source.URL, in events and the UI); the conditions are kept for whoever looks next.

func stripGitRepository(s *sourcev1.GitRepository) {
	s.Spec = sourcev1.GitRepositorySpec{URL: s.Spec.URL}
	s.Status = sourcev1.GitRepositoryStatus{ObservedGeneration: s.Status.ObservedGeneration,
		Conditions: s.Status.Conditions, Artifact: s.Status.Artifact}
}

func stripOCIRepository(s *sourcev1.OCIRepository) {
	s.Spec = sourcev1.OCIRepositorySpec{URL: s.Spec.URL}
	s.Status = sourcev1.OCIRepositoryStatus{ObservedGeneration: s.Status.ObservedGeneration,
		Conditions: s.Status.Conditions, Artifact: s.Status.Artifact}
}

func stripBucket(s *sourcev1.Bucket) {
	s.Spec = sourcev1.BucketSpec{Endpoint: s.Spec.Endpoint, BucketName: s.Spec.BucketName}
	s.Status = sourcev1.BucketStatus{ObservedGeneration: s.Status.ObservedGeneration,
		Conditions: s.Status.Conditions, Artifact: s.Status.Artifact}
}
