package patch

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// A cached resourceVersion older than the last write of ours is stale; one at or past it, or one
// that does not compare, is not.
func TestOwnWritesTellsAStaleRead(t *testing.T) {
	var w OwnWrites
	key := types.NamespacedName{Namespace: "ns", Name: "app"}
	if w.Stale(key, "1") {
		t.Fatal("never written: stale")
	}
	w.Record(key, "100")
	for rv, want := range map[string]bool{"99": true, "100": false, "101": false, "x": false} {
		if got := w.Stale(key, rv); got != want {
			t.Errorf("last write 100, read %s: stale %v, want %v", rv, got, want)
		}
	}
	w.Record(key, "")
	if !w.Stale(key, "99") {
		t.Error("an empty resourceVersion replaced the last write")
	}
	w.Forget(key)
	if w.Stale(key, "99") {
		t.Error("forgotten, still stale")
	}
}
