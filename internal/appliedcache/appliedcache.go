// Package appliedcache remembers, for each object the controller generates, what it applied last
// and what the apply left, so that an object found as it was left costs neither a read nor a write.
package appliedcache

import (
	"crypto/sha256"
	"fmt"
	"hash/fnv"
	"maps"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Cache remembers what was applied to which generation of each generated object, and
// the labels and owner references the apply left. A spec changed by someone else moves the
// generation, and the next reconcile reclaims the object; labels and owner references are
// compared whole with the cached object (an extra one is drift too). For an object whose status
// the cache does not hold (the ExternalArtifact), it also remembers the status last written or
// read.
type Cache struct {
	mu sync.Mutex
	m  map[types.UID]Config
}

// KnownStatus is an object's status at resourceVersion rv, as this controller last wrote or read
// it: its digest, and its conditions, the base of the next status (their transition times).
// prev is the resourceVersion before that write, which a cache not yet past it still shows.
type KnownStatus struct {
	Digest     [sha256.Size]byte
	Conditions []metav1.Condition
	RV, Prev   string
}

type Config struct {
	Digest     string
	generation int64
	labels     map[string]string
	// owners identifies the owner references (ownersDigest): there is one, whose copy would
	// cost a hundred bytes per object
	owners uint64
	// status is kept in the same entry (a second map keyed by UID cost as much again), for the
	// objects whose status is not cached
	status *KnownStatus
}

// AsLeft reports whether live is as the apply recorded left it: the same generation, labels and
// owner references.
func (c Config) AsLeft(live client.Object) bool {
	return c.generation == live.GetGeneration() && maps.Equal(c.labels, live.GetLabels()) &&
		c.owners == ownersDigest(live.GetOwnerReferences())
}

// ownersDigest identifies owner references by what an owner reference says.
func ownersDigest(refs []metav1.OwnerReference) uint64 {
	h := fnv.New64a()
	for _, o := range refs {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%v\x00%v\x00", o.APIVersion, o.Kind, o.Name, o.UID,
			ptr.Deref(o.Controller, false), ptr.Deref(o.BlockOwnerDeletion, false))
		// nil and false differ on the object
		fmt.Fprintf(h, "%t%t\x00", o.Controller == nil, o.BlockOwnerDeletion == nil)
	}
	return h.Sum64()
}

// Get returns what was applied to the object last.
func (a *Cache) Get(uid types.UID) (Config, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.m[uid]
	return c, ok
}

func (a *Cache) Record(applied client.Object, digest string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[types.UID]Config{}
	}
	a.m[applied.GetUID()] = Config{Digest: digest, generation: applied.GetGeneration(), labels: applied.GetLabels(),
		owners: ownersDigest(applied.GetOwnerReferences()), status: a.m[applied.GetUID()].status}
}

func (a *Cache) Forget(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, uid)
}

// StatusAt returns the status known of the object at resourceVersion rv.
func (a *Cache) StatusAt(uid types.UID, rv string) (KnownStatus, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.m[uid].status
	if rv == "" || s == nil || (rv != s.RV && rv != s.Prev) {
		return KnownStatus{}, false
	}
	return *s, true
}

// SawStatus remembers the status of the object at resourceVersion rv (prev: the one before), for
// an object applied before: one not yet applied by this process is reclaimed first, and its
// apply answers with its status.
func (a *Cache) SawStatus(uid types.UID, rv, prev string, conds []metav1.Condition, digest [sha256.Size]byte) KnownStatus {
	s := KnownStatus{Digest: digest, RV: rv, Prev: prev}
	for _, c := range conds {
		s.Conditions = append(s.Conditions, *c.DeepCopy())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.m[uid]; ok {
		c.status = &s
		a.m[uid] = c
	}
	return s
}
