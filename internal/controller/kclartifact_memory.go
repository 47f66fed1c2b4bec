package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare/fairqueue"
)

// errSuperseded ends a reconcile whose KCLArtifact was deleted or suspended meanwhile: the
// render it waits for would be thrown away.
var errSuperseded = errors.New("the KCLArtifact was deleted or suspended during the reconciliation")

// inflight are the reconciles running, so that a deletion or suspension can cancel them.
type inflight struct {
	mu      sync.Mutex
	cancels map[types.NamespacedName]context.CancelCauseFunc
}

func (f *inflight) start(ctx context.Context, key types.NamespacedName) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	f.mu.Lock()
	if f.cancels == nil {
		f.cancels = map[types.NamespacedName]context.CancelCauseFunc{}
	}
	f.cancels[key] = cancel
	f.mu.Unlock()
	return ctx, func() {
		f.mu.Lock()
		delete(f.cancels, key)
		f.mu.Unlock()
		cancel(nil)
	}
}

func (f *inflight) cancel(key types.NamespacedName) { f.cancelWith(key, errSuperseded) }

// cut ends a reconcile that held the work queue's fast lane past the slice (see fairshare):
// it fails, says why, and is retried like any failure.
func (f *inflight) cut(key types.NamespacedName) {
	f.cancelWith(key, fmt.Errorf("%w (%s)", fairshare.ErrCut, fairqueue.Slice))
}

func (f *inflight) cancelWith(key types.NamespacedName, cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.cancels[key]; ok {
		c(cause)
	}
}

// advancedPhases remembers, per waiting Kustomization, the predecessor's Ready turn it was
// asked to reconcile for: a Kustomization whose other dependencies (from the template's
// dependsOn) keep it waiting is asked once, not on each of its status writes. Lost on a
// restart, which costs one request more.
type advancedPhases struct {
	mu sync.Mutex
	m  map[types.UID]string
}

func (a *advancedPhases) asked(uid types.UID, turn string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.m[uid] == turn
}

func (a *advancedPhases) record(uid types.UID, turn string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[types.UID]string{}
	}
	a.m[uid] = turn
}

func (a *advancedPhases) forget(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, uid)
}

// failureCounts are the failures in a row of each KCLArtifact's generation, for the backoff.
type failureCounts struct {
	mu sync.Mutex
	n  map[types.NamespacedName]failureCount
}

type failureCount struct {
	generation int64
	count      int
}

// add counts a failure and returns how many in a row this generation has had.
func (f *failureCounts) add(obj client.Object) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[types.NamespacedName]failureCount{}
	}
	key := client.ObjectKeyFromObject(obj)
	c := f.n[key]
	if c.generation != obj.GetGeneration() {
		c = failureCount{generation: obj.GetGeneration()}
	}
	c.count++
	f.n[key] = c
	return c.count
}

func (f *failureCounts) reset(obj client.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.n, client.ObjectKeyFromObject(obj))
}
