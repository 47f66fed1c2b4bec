package cachestrip

import (
	"reflect"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/randfill"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/source"
)

// filled is an object of o's type with every field set, at any depth.
func filled[T any](t *testing.T, seed int64) T {
	t.Helper()
	var o T
	randfill.NewWithSeed(seed).NilChance(0).NumElements(1, 3).Fill(&o)
	return o
}

// withLastApplied adds kubectl's annotation, which every transform drops.
func withLastApplied(m *metav1.ObjectMeta) {
	m.Annotations[corev1.LastAppliedConfigAnnotation] = `{"kind":"whole object"}`
}

// keptMeta is what every transform keeps of the metadata.
func keptMeta(m metav1.ObjectMeta) metav1.ObjectMeta {
	m = *m.DeepCopy()
	m.ManagedFields = nil
	delete(m.Annotations, corev1.LastAppliedConfigAnnotation)
	return m
}

func transformFor(t *testing.T, o ctrlclient.Object) toolscache.TransformFunc {
	t.Helper()
	byObject := map[ctrlclient.Object]ctrlcache.ByObject{}
	Set(byObject)
	for k, c := range byObject {
		if reflect.TypeOf(k) == reflect.TypeOf(o) {
			return c.Transform
		}
	}
	t.Fatalf("no transform for %T", o)
	return nil
}

func transformed[T ctrlclient.Object](t *testing.T, in T) T {
	t.Helper()
	out, err := transformFor(t, in)(in.DeepCopyObject())
	if err != nil {
		t.Fatal(err)
	}
	return out.(T)
}

// Each case says, field by field, what the cached object holds: the input has every field set,
// so a field a transform forgot to drop, or dropped when a reader needs it, fails the comparison.
func TestKustomizationKeepsWhatTheControllerReads(t *testing.T) {
	for seed := range int64(20) {
		in := filled[kustomizev1.Kustomization](t, seed)
		withLastApplied(&in.ObjectMeta)
		want := kustomizev1.Kustomization{TypeMeta: in.TypeMeta, ObjectMeta: keptMeta(in.ObjectMeta)}
		// orphanKustomization: deletionPolicy; phaseState and mirrorKustomization: suspend;
		// failedJob: kubeConfig
		want.Spec = kustomizev1.KustomizationSpec{Suspend: in.Spec.Suspend, KubeConfig: in.Spec.KubeConfig.DeepCopy(),
			DeletionPolicy: in.Spec.DeletionPolicy}
		// phaseState, mirrorKustomization, artifactVerdict: conditions, generations, revisions;
		// remediate: lastHandledReconcileAt
		want.Status = kustomizev1.KustomizationStatus{ObservedGeneration: in.Status.ObservedGeneration,
			Conditions: in.Status.Conditions, LastAppliedRevision: in.Status.LastAppliedRevision,
			LastAttemptedRevision: in.Status.LastAttemptedRevision, ReconcileRequestStatus: in.Status.ReconcileRequestStatus}
		got := transformed(t, &in)
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("seed %d: cached Kustomization\n%+v\nwant\n%+v", seed, *got, want)
		}
		if got.Status.Inventory != nil || got.Status.History != nil || got.Spec.PostBuild != nil {
			t.Fatalf("seed %d: the inventory, history and postBuild are cached", seed)
		}
	}
}

func TestSourcesKeepTheirArtifactAndAddress(t *testing.T) {
	for seed := range int64(20) {
		git := filled[sourcev1.GitRepository](t, seed)
		oci := filled[sourcev1.OCIRepository](t, seed)
		bucket := filled[sourcev1.Bucket](t, seed)
		for _, m := range []*metav1.ObjectMeta{&git.ObjectMeta, &oci.ObjectMeta, &bucket.ObjectMeta} {
			withLastApplied(m)
		}
		for _, tc := range []struct {
			in, want source.Source
		}{
			{&git, &sourcev1.GitRepository{TypeMeta: git.TypeMeta, ObjectMeta: keptMeta(git.ObjectMeta), Spec: sourcev1.GitRepositorySpec{URL: git.Spec.URL},
				Status: sourcev1.GitRepositoryStatus{ObservedGeneration: git.Status.ObservedGeneration,
					Conditions: git.Status.Conditions, Artifact: git.Status.Artifact}}},
			{&oci, &sourcev1.OCIRepository{TypeMeta: oci.TypeMeta, ObjectMeta: keptMeta(oci.ObjectMeta), Spec: sourcev1.OCIRepositorySpec{URL: oci.Spec.URL},
				Status: sourcev1.OCIRepositoryStatus{ObservedGeneration: oci.Status.ObservedGeneration,
					Conditions: oci.Status.Conditions, Artifact: oci.Status.Artifact}}},
			{&bucket, &sourcev1.Bucket{TypeMeta: bucket.TypeMeta, ObjectMeta: keptMeta(bucket.ObjectMeta),
				Spec: sourcev1.BucketSpec{Endpoint: bucket.Spec.Endpoint, BucketName: bucket.Spec.BucketName},
				Status: sourcev1.BucketStatus{ObservedGeneration: bucket.Status.ObservedGeneration,
					Conditions: bucket.Status.Conditions, Artifact: bucket.Status.Artifact}}},
		} {
			got := transformed(t, tc.in)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("seed %d: cached %T\n%+v\nwant\n%+v", seed, got, got, tc.want)
			}
			// what source.Get and source.URL give the controller is unchanged
			if !reflect.DeepEqual(got.GetArtifact(), tc.in.GetArtifact()) || source.URL(got) != source.URL(tc.in) {
				t.Fatalf("seed %d: %T reads otherwise from the cache", seed, got)
			}
		}
	}
}

// The KCLArtifact's status is the base of every status patch, and the server and the UI read it:
// it keeps everything but the managed fields and the last-applied annotation.
func TestKCLArtifactKeepsAllButBookkeeping(t *testing.T) {
	for seed := range int64(20) {
		kcl := filled[kclv1.KCLArtifact](t, seed)
		withLastApplied(&kcl.ObjectMeta)
		want := &kclv1.KCLArtifact{TypeMeta: kcl.TypeMeta, ObjectMeta: keptMeta(kcl.ObjectMeta), Spec: kcl.Spec, Status: kcl.Status}
		if got := transformed(t, &kcl); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: cached KCLArtifact\n%+v\nwant\n%+v", seed, got, want)
		}
	}
}

// An ExternalArtifact is cached as its metadata (the controller watches it with
// builder.OnlyMetadata): the transform of its kind is its metadata informer's, and keeps all of
// the metadata but the bookkeeping.
func TestExternalArtifactMetadataKeepsAllButBookkeeping(t *testing.T) {
	transform := transformFor(t, &sourcev1.ExternalArtifact{})
	for seed := range int64(20) {
		ea := filled[sourcev1.ExternalArtifact](t, seed)
		withLastApplied(&ea.ObjectMeta)
		in := &metav1.PartialObjectMetadata{TypeMeta: ea.TypeMeta, ObjectMeta: *ea.ObjectMeta.DeepCopy()}
		out, err := transform(in)
		if err != nil {
			t.Fatal(err)
		}
		want := &metav1.PartialObjectMetadata{TypeMeta: ea.TypeMeta, ObjectMeta: keptMeta(ea.ObjectMeta)}
		if !reflect.DeepEqual(out, want) {
			t.Fatalf("seed %d: cached ExternalArtifact metadata\n%+v\nwant\n%+v", seed, out, want)
		}
	}
}

func TestAnnotationsGoWhenOnlyLastAppliedWasThere(t *testing.T) {
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{
		Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: "{}"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}}
	got := transformed(t, ks)
	if got.Annotations != nil || got.ManagedFields != nil {
		t.Fatalf("metadata kept %v, %v", got.Annotations, got.ManagedFields)
	}
}

func TestTombstonesPassThrough(t *testing.T) {
	tomb := toolscache.DeletedFinalStateUnknown{Key: "ns/name"}
	got, err := transformFor(t, &kustomizev1.Kustomization{})(tomb)
	if err != nil || got != tomb {
		t.Fatalf("a tombstone became %v, %v", got, err)
	}
}

// Set keeps what the options already said of a kind (the KCLArtifacts' label selector of a
// shard), and adds no second entry for it.
func TestSetKeepsTheLabelSelector(t *testing.T) {
	sel := metav1.SetAsLabelSelector(map[string]string{"shard": "a"})
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	byObject := map[ctrlclient.Object]ctrlcache.ByObject{&kclv1.KCLArtifact{}: {Label: selector},
		&corev1.Secret{}: {Label: selector}}
	Set(byObject)
	kinds := sets.New[string]()
	for k, c := range byObject {
		kind := reflect.TypeOf(k).Elem().Name()
		if kinds.Has(kind) {
			t.Fatalf("two entries for %s", kind)
		}
		kinds.Insert(kind)
		switch k.(type) {
		case *kclv1.KCLArtifact:
			if c.Label == nil || c.Label.String() != selector.String() || c.Transform == nil {
				t.Fatalf("KCLArtifact entry %+v", c)
			}
		case *corev1.Secret:
			if c.Transform != nil {
				t.Fatal("a Secret got a transform: the default one was meant")
			}
		}
	}
	if want := sets.New("KCLArtifact", "Secret", "ExternalArtifact", "Kustomization", "GitRepository",
		"OCIRepository", "Bucket"); !kinds.Equal(want) {
		t.Fatalf("kinds %v, want %v", sets.List(kinds), sets.List(want))
	}
}
