package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputexpr"
)

// Bounds are the operator's limits on what a KCLArtifact asks for: a tenant cannot stretch how
// long it holds the shared workers, nor how often it takes them.
type Bounds struct {
	// MaxTimeout caps spec.timeout, and the timeouts the generated Kustomizations get.
	MaxTimeout time.Duration
	// MinInterval raises spec.interval and spec.retryInterval (the Kustomizations' too) to it.
	MinInterval time.Duration
	// FetchTimeout bounds downloading and unpacking the source; PublishTimeout storing the
	// artifact and writing the ExternalArtifact and Kustomizations. Each is inside the whole.
	FetchTimeout, PublishTimeout time.Duration
	// OutputBudget bounds the rendered output held by all reconciles at once, in bytes; outputs
	// under smallOutput are not counted. Nil: no bound.
	OutputBudget *fairshare.Budget
	// ExpressionBudget bounds the wall-clock time of each evaluation of a CEL expression
	// (argumentsFrom values, spec.exports), whatever the reconcile's deadline; 0 is
	// DefaultExpressionBudget.
	ExpressionBudget time.Duration
}

// Defaults of Bounds.
const (
	DefaultMaxTimeout     = 10 * time.Minute
	DefaultMinInterval    = 10 * time.Second
	DefaultFetchTimeout   = 2 * time.Minute
	DefaultPublishTimeout = time.Minute
	// DefaultExpressionBudget is --expression-time-budget's default.
	DefaultExpressionBudget = inputexpr.DefaultTimeBudget
	// DefaultOutputBudget is one render at the default --kcl-max-output-size at a time.
	DefaultOutputBudget = 64 << 20
	// smallOutput is held without a reservation: a few KCLArtifacts' worth never adds up, and a
	// small render never waits behind a tenant's large ones.
	smallOutput = 1 << 20
)

// timeout is the reconcile's deadline.
func (b Bounds) timeout(obj *kclv1.KCLArtifact) time.Duration {
	return capped(obj.GetTimeout(), b.MaxTimeout)
}

// interval is the requeue interval after a success.
func (b Bounds) interval(obj *kclv1.KCLArtifact) time.Duration {
	return max(obj.GetRequeueAfter(), b.MinInterval)
}

// retry is the requeue interval after the failures-th failure in a row: the retry interval,
// doubled for every failure before it, up to the interval.
func (b Bounds) retry(obj *kclv1.KCLArtifact, failures int) time.Duration {
	base := max(obj.GetRetryInterval(), b.MinInterval)
	limit := max(base, b.interval(obj))
	d := base
	for i := 1; i < failures && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// kustomization bounds a generated Kustomization's spec the same way.
func (b Bounds) kustomization(spec kustomizev1.KustomizationSpec) kustomizev1.KustomizationSpec {
	if b.MinInterval > 0 && spec.Interval.Duration < b.MinInterval {
		spec.Interval = metav1.Duration{Duration: b.MinInterval}
	}
	if spec.RetryInterval != nil && spec.RetryInterval.Duration < b.MinInterval {
		spec.RetryInterval = &metav1.Duration{Duration: b.MinInterval}
	}
	// kustomize-controller's timeout defaults to the interval: set it only when that is too long.
	effective := spec.Interval.Duration
	if spec.Timeout != nil {
		effective = spec.Timeout.Duration
	}
	if b.MaxTimeout > 0 && effective > b.MaxTimeout {
		spec.Timeout = &metav1.Duration{Duration: b.MaxTimeout}
	}
	return spec
}

func capped(d, limit time.Duration) time.Duration {
	if limit > 0 {
		return min(d, limit)
	}
	return d
}

// bounded bounds one step of the pipeline inside the reconcile's deadline.
func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// outputHold is a reconcile's part of the output budget, taken when the render's answer arrives
// and kept until the artifact is published and announced.
func (b Bounds) outputHold() *outputHold {
	if b.OutputBudget == nil {
		return nil
	}
	return &outputHold{b.OutputBudget.Hold()}
}

type outputHold struct{ *fairshare.Hold }

// reserve is the engine session's Reserve.
func (h *outputHold) reserve(ctx context.Context, size uint64) error {
	if size < smallOutput {
		return nil
	}
	return h.Take(ctx, int64(size))
}

func (h *outputHold) release() {
	if h != nil {
		h.Release()
	}
}

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
	f.cancelWith(key, fmt.Errorf("%w (%s)", fairshare.ErrCut, queueSlice))
}

func (f *inflight) cancelWith(key types.NamespacedName, cause error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.cancels[key]; ok {
		c(cause)
	}
}

// cutShort tells whether the reconcile, or the render or fetch it waited for, was cut short in
// a fast lane.
func cutShort(ctx context.Context, err error) bool {
	return errors.Is(context.Cause(ctx), fairshare.ErrCut) || errors.Is(err, fairshare.ErrCut)
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

// queueQuantum is a namespace's turn in the work queue: its requests queued together (a source's
// new revision) are handed out together, so that its KCL worker stays warm, and a namespace
// behind it waits at most this long per busy namespace ahead of it.
const queueQuantum = time.Second

// queueSlice is the work queue's slice: longer than the render's and the fetch's, because a
// reconcile in the fast lane may wait for the fast lane of the KCL workers (a slice at most) and
// must not be cut, and its namespace made slow, for that wait.
const queueSlice = 2 * fairshare.DefaultSlice

// NewFairQueue is the controller's work queue: namespaces take turns, one holds at most
// perNamespace of the reconcile workers, so a tenant with many slow objects delays
// another by about one reconcile instead of all of its own; and the last free worker is the fast
// lane, which a namespace whose reconciles outlast the slice never takes, however many namespaces
// the tenant has. A reconcile in it past the slice is cut with cut.
func NewFairQueue(workers, perNamespace int, cut func(reconcile.Request)) func(string, workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	return func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		fair := fairshare.NewQueue(func(r reconcile.Request) string { return r.Namespace }, perNamespace, queueQuantum, recordQueueWait).
			WithLanes(workers, queueSlice, fairshare.DefaultSlowFor, cut)
		queueLen.Store(fair.Len)
		delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[reconcile.Request]{Queue: fair})
		return workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{DelayingQueue: delaying})
	}
}

// keepCut is shown, a message rewritten from err, still marked cut short when err was.
func keepCut(err, shown error) error {
	if errors.Is(err, fairshare.ErrCut) {
		return fairshare.Cut(shown)
	}
	return shown
}
