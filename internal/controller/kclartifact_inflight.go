package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
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

// cancelSuperseded is the watch that cancels a reconcile in flight when its KCLArtifact is
// deleted or suspended; it queues nothing (the For watch does).
func (r *KCLArtifactReconciler) cancelSuperseded() handler.EventHandler {
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if superseded(e.ObjectNew) {
				r.running.cancel(client.ObjectKeyFromObject(e.ObjectNew))
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			r.running.cancel(client.ObjectKeyFromObject(e.Object))
		},
	}
}

func superseded(o client.Object) bool {
	obj, ok := o.(*kclv1.KCLArtifact)
	return ok && (obj.Spec.Suspend || !obj.GetDeletionTimestamp().IsZero())
}
