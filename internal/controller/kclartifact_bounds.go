package controller

import (
	"context"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
