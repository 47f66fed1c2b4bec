package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"

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
