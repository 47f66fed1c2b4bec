package patch

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// OwnWrites remembers the resourceVersion each KCLArtifact had after this controller last wrote
// it. A KCLArtifact queued again while its reconcile was still writing (its ExternalArtifact or
// Kustomization changed meanwhile) is reconciled right after, and the cache may not have the
// status just written yet: that reconcile would render and store again what was just stored
// (15 artifacts stored twice in a re-publish of 1,000 with restarts, make bench-scale-faults).
// A cached object older than the last write is read again from the API server.
type OwnWrites struct{ m sync.Map }

// Record remembers rv as key's resourceVersion after a write of ours; an empty rv is none.
func (w *OwnWrites) Record(key types.NamespacedName, rv string) {
	if rv != "" {
		w.m.Store(key, rv)
	}
}

// Forget drops what was remembered of key.
func (w *OwnWrites) Forget(key types.NamespacedName) { w.m.Delete(key) }

// Stale reports whether rv is older than the last write of key. Resource versions that do not
// compare (not etcd's integers) are never stale: the cache is trusted as before.
func (w *OwnWrites) Stale(key types.NamespacedName, rv string) bool {
	last, ok := w.m.Load(key)
	if !ok {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(rv, last.(string))
	return err == nil && c < 0
}
