// Package fairqueue is the controller's work queue of reconcile requests: a fairshare.Queue in
// which the namespaces take turns and the last free reconcile worker is the fast lane, wrapped
// as the delaying, rate-limiting queue controller-runtime asks for, and observed by the
// queue_wait_seconds and queue_depth metrics.
package fairqueue

import (
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/metrics"
)

// Quantum is a namespace's turn in the work queue: its requests queued together (a source's
// new revision) are handed out together, so that its KCL worker stays warm, and a namespace
// behind it waits at most this long per busy namespace ahead of it.
const Quantum = time.Second

// Slice is the work queue's slice: longer than the render's and the fetch's, because a
// reconcile in the fast lane may wait for the fast lane of the KCL workers (a slice at most) and
// must not be cut, and its namespace made slow, for that wait.
const Slice = 2 * fairshare.DefaultSlice

// New is the controller's work queue: namespaces take turns, one holds at most
// perNamespace of the reconcile workers, so a tenant with many slow objects delays
// another by about one reconcile instead of all of its own; and the last free worker is the fast
// lane, which a namespace whose reconciles outlast the slice never takes, however many namespaces
// the tenant has. A reconcile in it past the slice is cut with cut.
func New(workers, perNamespace int, cut func(reconcile.Request)) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		fair := fairshare.NewQueue(func(r reconcile.Request) string { return r.Namespace }, perNamespace, Quantum, metrics.RecordQueueWait).
			WithLanes(workers, Slice, fairshare.DefaultSlowFor, cut)
		metrics.SetQueueLen(fair.Len)
		delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[reconcile.Request]{Queue: fair})
		return workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{DelayingQueue: delaying})
	}
}
