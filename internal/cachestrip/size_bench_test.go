package cachestrip

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// BenchmarkCachedKustomization reports what one generated Kustomization holds in the cache, as
// kustomize-controller leaves it after applying n objects five times, with the default transform
// (managed fields stripped) and with this package's: go test ./internal/cachestrip -bench . -run ^$
func BenchmarkCachedKustomization(b *testing.B) {
	for _, n := range []int{2, 50} {
		data, err := json.Marshal(appliedKustomization(n))
		if err != nil {
			b.Fatal(err)
		}
		for _, tc := range []struct {
			name      string
			transform toolscache.TransformFunc
		}{{"default", ctrlcache.TransformStripManagedFields()}, {"cachestrip", transformOf(stripKustomization)}} {
			b.Run(fmt.Sprintf("objects=%d/%s", n, tc.name), func(b *testing.B) {
				b.ReportMetric(retainedBytes[kustomizev1.Kustomization](b, data, tc.transform), "B/cached")
			})
		}
	}
}

// BenchmarkCachedKCLArtifact reports what one KCLArtifact of `make bench-scale-compare` holds in
// the cache after a create and a commit (testdata/kclartifact.json: two history entries, two
// objects). It is cached whole: its status is the base of every status patch.
func BenchmarkCachedKCLArtifact(b *testing.B) {
	data, err := os.ReadFile("testdata/kclartifact.json")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(retainedBytes[kclv1.KCLArtifact](b, data, stripMetadata), "B/cached")
}

// BenchmarkCachedExternalArtifact reports what one generated ExternalArtifact of `make
// bench-scale-compare` holds in the cache (testdata/externalartifact.json): decoded whole, as
// before the controller watched its metadata only, and as the metadata it is cached as now.
func BenchmarkCachedExternalArtifact(b *testing.B) {
	data, err := os.ReadFile("testdata/externalartifact.json")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("whole", func(b *testing.B) {
		b.ReportMetric(retainedBytes[sourcev1.ExternalArtifact](b, data, stripMetadata), "B/cached")
	})
	b.Run("metadata", func(b *testing.B) {
		b.ReportMetric(retainedBytes[metav1.PartialObjectMetadata](b, data, stripMetadata), "B/cached")
	})
}

// retainedBytes decodes data 1,000 times as the informer does, transforms each, keeps them all
// and returns the heap they hold, per object.
func retainedBytes[T any](b *testing.B, data []byte, transform toolscache.TransformFunc) float64 {
	const count = 1000
	var per float64
	for b.Loop() {
		kept := make([]any, count)
		before := heapAfterGC()
		for i := range kept {
			o := new(T)
			if err := json.Unmarshal(data, o); err != nil {
				b.Fatal(err)
			}
			out, err := transform(o)
			if err != nil {
				b.Fatal(err)
			}
			kept[i] = out
		}
		per = float64(heapAfterGC()-before) / count
		runtime.KeepAlive(kept)
	}
	return per
}

func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// appliedKustomization is a generated Kustomization after kustomize-controller applied n objects:
// its inventory, a history of five artifacts and its conditions.
func appliedKustomization(n int) *kustomizev1.Kustomization {
	now := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	rev := "main@sha256:365ecba4902c7ed9369b00b7c0d71a6165c7fd4077718aac292b3d6f04d9195c"
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{
		Name: "app-0001", Namespace: "team-a", UID: "f9ab3127-88b3-49ef-9b4a-5a2bcebd6aa5", ResourceVersion: "123456",
		Generation: 1, Labels: map[string]string{"kcl.contrib.fluxcd.io/name": "app-0001"},
		Finalizers: []string{"finalizers.fluxcd.io"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "kcl.contrib.fluxcd.io/v1alpha1", Kind: "KCLArtifact",
			Name: "app-0001", UID: "f9ab3127-88b3-49ef-9b4a-5a2bcebd6aa5"}},
	}}
	ks.Spec = kustomizev1.KustomizationSpec{Path: "./", Prune: true, Interval: metav1.Duration{Duration: time.Hour},
		SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: "ExternalArtifact", Name: "app-0001", Namespace: "team-a"}}
	ks.Status.ObservedGeneration, ks.Status.LastAppliedRevision, ks.Status.LastAttemptedRevision = 1, rev, rev
	ks.Status.Conditions = []metav1.Condition{{Type: meta.ReadyCondition, Status: metav1.ConditionTrue, ObservedGeneration: 1,
		LastTransitionTime: now, Reason: meta.ReconciliationSucceededReason, Message: "Applied revision: " + rev}}
	ks.Status.Inventory = &kustomizev1.ResourceInventory{}
	for i := range n {
		ks.Status.Inventory.Entries = append(ks.Status.Inventory.Entries, kustomizev1.ResourceRef{
			ID: fmt.Sprintf("team-a_app-0001-object-%03d_apps_Deployment", i), Version: "v1"})
	}
	for range 5 {
		ks.Status.History = append(ks.Status.History, meta.Snapshot{Digest: "sha256:8ed31492b6a138b751354b8f57e121c9c7f2070b3a068452d225fe7478e50c5a",
			FirstReconciled: now, LastReconciled: now, LastReconciledDuration: metav1.Duration{Duration: time.Second},
			LastReconciledStatus: meta.ReconciliationSucceededReason, TotalReconciliations: 3,
			Metadata: map[string]string{"revision": rev, "originRevision": "main@sha1:5b49fa5c70782c9fa1d40e5ea49bd470c4902394"}})
	}
	return ks
}
