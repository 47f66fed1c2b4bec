// Package controller reconciles KCLArtifacts: source artifact → KCL render → stored artifact →
// ExternalArtifact → generated Kustomization.
package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	"github.com/fluxcd/pkg/runtime/jitter"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kuberecorder "k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/depfetch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/patch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/source"
	"github.com/kcl-flux/kcl-artifact-controller/internal/sourcecache"
	"github.com/kcl-flux/kcl-artifact-controller/internal/staging"
)

// +kubebuilder:rbac:groups=kcl.contrib.fluxcd.io,resources=kclartifacts,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=kcl.contrib.fluxcd.io,resources=kclartifacts/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kcl.contrib.fluxcd.io,resources=kclartifacts/finalizers,verbs=update
// +kubebuilder:rbac:groups=kcl.contrib.fluxcd.io,resources=kclartifacts,verbs=generate
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=gitrepositories;ocirepositories;buckets,verbs=get;list;watch
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=externalartifacts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=externalartifacts/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kustomize.toolkit.fluxcd.io,resources=kustomizations,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=configmaps;secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get
// +kubebuilder:rbac:groups=image.toolkit.fluxcd.io,resources=imagepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="";events.k8s.io,resources=events,verbs=create;patch

// KCLArtifactReconciler reconciles KCLArtifact objects.
type KCLArtifactReconciler struct {
	client.Client
	// APIReader reads around the cache, which keeps no managed fields; nil reads the client.
	APIReader client.Reader
	kuberecorder.EventRecorder
	runtimectrl.Metrics

	ControllerName string
	Store          *artifactstore.Store
	Fetcher        *source.Fetcher
	// Sources, when set, stages sources from unpacked trees shared by the renders of a revision.
	Sources *sourcecache.Cache
	// Engine renders KCL in worker processes, one trust domain per namespace.
	Engine *kclworker.Pool
	// Staging holds each render's source and dependencies, per namespace.
	Staging *staging.Area
	// MaxOutput (bytes) and MaxObjects bound a render's output; 0 means no bound.
	MaxOutput, MaxObjects int
	// Deps resolves kcl.mod dependencies; nil renders without resolving them.
	Deps *depfetch.Fetcher
	// EngineVersion is part of every input digest: a new engine renders everything again.
	EngineVersion        string
	NoCrossNamespaceRefs bool
	// ArgumentKinds are the kinds argumentsFrom may read with expressions (--arguments-from-kinds).
	ArgumentKinds *arguments.Kinds
	// NoImagePolicies is set when the API server does not serve ImagePolicies: none is watched.
	NoImagePolicies bool
	// Renders counts renders, so tests can prove an unchanged input is not rendered again.
	Renders func()
	// Bounds are the operator's limits on time, intervals and held output.
	Bounds Bounds

	running  inflight
	failures failureCounts
	applied  appliedConfigs
	shared   sharedRenders
	writes   patch.OwnWrites
	advanced advancedPhases
}

// Reconcile is the entry point of a reconciliation.
func (r *KCLArtifactReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	start := time.Now()
	// Registered before the object is read: a deletion or suspension the read does not show yet
	// cancels the pipeline (pipelineCtx) when its event arrives.
	pipelineCtx, done := r.running.start(ctx, req.NamespacedName)
	defer done()
	obj, err := r.latest(ctx, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	patcher := newStatusPatcher(obj, r.Client, r.ControllerName, ownedConditions)
	// pipelineRan: the pipeline started; historyKnown: status.history is the recorded one
	var pipelineRan, historyKnown bool

	defer func() {
		// A pipeline cut short by a deletion or suspension writes nothing: the status keeps
		// what the last finished one said, and the next reconcile finalizes or suspends.
		if pipelineRan && errors.Is(context.Cause(pipelineCtx), errSuperseded) {
			return
		}
		// the store's record first: the status written next is its copy (restoreHistory)
		if historyKnown {
			if err := r.Store.RecordHistory(obj, obj.Status.History); err != nil {
				retErr = errors.Join(retErr, err)
			}
		}
		if err := r.patchStatus(ctx, obj, patcher, retErr); err != nil && !apierrors.IsNotFound(err) {
			retErr = errors.Join(retErr, err)
		}
		r.writes.Record(req.NamespacedName, obj.ResourceVersion)
		// Only the duration, as Flux's controllers do: gotk_reconcile_condition and
		// gotk_suspend_status are deprecated for kube-state-metrics' gotk_resource_info, and
		// cost 10 series per object (a third of the heap's live metrics at 1,000 objects).
		r.Metrics.RecordDuration(ctx, obj, start)
	}()

	if !obj.GetDeletionTimestamp().IsZero() {
		return r.finalize(ctx, obj)
	}
	if !controllerutil.ContainsFinalizer(obj, kclv1.Finalizer) {
		controllerutil.AddFinalizer(obj, kclv1.Finalizer)
		if err := patcher.Patch(ctx, obj); err != nil {
			return ctrl.Result{}, err
		}
	}
	if v, ok := meta.ReconcileAnnotationValue(obj.GetAnnotations()); ok {
		obj.Status.SetLastHandledReconcileRequest(v)
	}
	if obj.Spec.Suspend {
		ctrl.LoggerFrom(ctx).Info("reconciliation is suspended for this object")
		return ctrl.Result{}, nil
	}
	// The deadline bounds the pipeline, not the status patch deferred above.
	pipelineCtx, cancel := context.WithTimeout(pipelineCtx, r.Bounds.timeout(obj))
	defer cancel()
	pipelineRan = true
	// A deleted object of the same name left its artifacts (its finalizer did not run): none of
	// them is this object's to check, pin or publish. Status is a copy for readers, which a
	// namespace admin can write: what it names that is not this object's is dropped, and its
	// history is the recorded one (kclartifact_trust.go).
	if err := r.Store.DropForeign(obj); err != nil {
		return r.failed(pipelineCtx, obj, fail(kclv1.StorageFailedReason, err))
	}
	r.announceRepair(obj, r.repairStatus(obj))
	if err := r.restoreHistory(obj); err != nil {
		return r.failed(pipelineCtx, obj, err)
	}
	historyKnown = true
	return r.reconcile(pipelineCtx, obj)
}

// latest reads the KCLArtifact from the cache, or from the API server when the cache has not yet
// seen this controller's last write of it.
func (r *KCLArtifactReconciler) latest(ctx context.Context, key types.NamespacedName) (*kclv1.KCLArtifact, error) {
	obj := &kclv1.KCLArtifact{}
	err := r.Get(ctx, key, obj)
	if err == nil && r.APIReader != nil && r.writes.Stale(key, obj.ResourceVersion) {
		err = r.APIReader.Get(ctx, key, obj)
	}
	if apierrors.IsNotFound(err) {
		r.writes.Forget(key)
	}
	return obj, err
}

// reconcile runs the pipeline. A failed step leaves what was published before untouched.
func (r *KCLArtifactReconciler) reconcile(ctx context.Context, obj *kclv1.KCLArtifact) (ctrl.Result, error) {
	if err := checkReferences(obj); err != nil {
		return r.failed(ctx, obj, err)
	}
	if obj.Spec.Promotion == nil {
		obj.Status.Promotion = nil
		conditions.Delete(obj, kclv1.PromotedCondition)
	}
	markProgressing(obj)
	// serving a rolled-back artifact is not a failure the next success recovers from
	wasFailing := conditions.IsFalse(obj, meta.ReadyCondition) && conditions.GetReason(obj, meta.ReadyCondition) != kclv1.RolledBackReason
	retryAll := settleRemediation(obj)
	// the rendered output this reconcile holds counts against the budget until it is announced
	hold := r.Bounds.outputHold()
	defer hold.release()
	pr, err := r.produce(ctx, obj, hold)
	if err != nil {
		// what a failed pin or render says is gone from storage, status says too
		r.markMissing(obj)
		r.keepPublished(ctx, obj, err)
		return r.failed(ctx, obj, err)
	}
	in, published, upToDate, promoteAt := pr.in, pr.published, pr.upToDate, pr.promoteAt
	if obj.Status.Artifact == nil && obj.Spec.Promotion != nil {
		// a stage whose first artifact waits: nothing to publish yet
		r.collectHistory(ctx, obj)
		if pr.renderErr != nil {
			return r.renderFailed(ctx, obj, pr)
		}
		markWaitingFirst(obj)
		return ctrl.Result{RequeueAfter: untilGate(r.Bounds.interval(obj), promoteAt)}, nil
	}
	// The server answers the URLs of this object (its UID) only, from now on: storage of an
	// earlier release, whose URLs had no UID, changes to this object's URLs as they are published.
	if err := r.Store.Bind(obj); err != nil {
		return r.failed(ctx, obj, fail(kclv1.StorageFailedReason, err))
	}
	// The advertised address may have changed since the artifact was stored (a restart with new
	// flags): the URL always follows the current one.
	r.Store.SetArtifactURL(obj, obj.Status.Artifact)
	publishCtx, cancel := step(ctx, r.Bounds.PublishTimeout)
	defer cancel()
	live, err := r.publish(publishCtx, obj)
	if err != nil {
		return r.failed(ctx, obj, err)
	}
	if retryAll {
		if err := r.retryAll(publishCtx, obj, live); err != nil {
			return r.failed(ctx, obj, err)
		}
	}
	r.recordHistory(obj, in.recordOf(published))
	if in != nil && in.promoted != nil {
		obj.Status.History[0].Promotion = &in.promoted.record
	}
	v := artifactVerdict(obj, live)
	markHealth(obj, v, false)
	var sensitive []string
	if in != nil {
		sensitive = in.secretValues
	}
	if err := r.remediate(publishCtx, obj, live, v, sensitive); err != nil {
		return r.failed(ctx, obj, err)
	}
	collectAt := r.collectHistory(ctx, obj)
	if obj.Spec.PinnedDigest != "" {
		markPinned(obj)
	} else {
		markReady(obj, upToDate)
		markRolledBack(obj)
	}
	if pr.renderErr != nil {
		// what waited was promoted; the render's failure is still the news
		r.announce(obj, published, false, in)
		return r.renderFailed(ctx, obj, pr)
	}
	r.announce(obj, published, wasFailing, in)
	r.failures.reset(obj)
	return ctrl.Result{RequeueAfter: untilGate(requeueAfter(jitter.JitteredIntervalDuration(r.Bounds.interval(obj)), collectAt), promoteAt)}, nil
}

// untilGate is the interval, or less when a stage's gate opens before it (the end of a soak,
// a window): the stage publishes as the gate opens, without polling.
func untilGate(interval time.Duration, opens time.Time) time.Duration {
	if opens.IsZero() {
		return interval
	}
	return min(interval, max(time.Until(opens), 0)+100*time.Millisecond)
}

// requeueAfter is the interval, or less when an old artifact's retention ends before it: the
// reconcile then removes it.
func requeueAfter(interval time.Duration, collectAt time.Time) time.Duration {
	if collectAt.IsZero() {
		return interval
	}
	return min(interval, max(time.Until(collectAt), time.Second))
}

// produced is what a reconcile publishes: the pinned artifact, the render's, or a stage's
// waiting artifact its gates let through.
type produced struct {
	in                  *inputs
	published, upToDate bool
	// promoteAt is when a stage's closed gate opens by itself.
	promoteAt time.Time
	// renderErr is a stage's failed render, reported once what already waited was promoted.
	renderErr error
}

// produce makes the artifact to publish. A stage's failed render does not hold back what it
// rendered before: a broken commit upstream does not stop the promotion of a proven one.
func (r *KCLArtifactReconciler) produce(ctx context.Context, obj *kclv1.KCLArtifact, hold *outputHold) (p produced, err error) {
	if err := exportsRefused(obj); err != nil {
		// nothing is rendered, and exports an earlier release published go
		obj.Status.Exports = nil
		return p, err
	}
	if obj.Spec.PinnedDigest != "" {
		p.published, err = r.pin(ctx, obj)
		return p, err
	}
	p.in, p.upToDate, err = r.renderLatest(ctx, obj, hold)
	if obj.Spec.Promotion == nil {
		p.published = err == nil && p.in.published
		return p, err
	}
	var se *stepError
	if err != nil && (!errors.As(err, &se) || se.transient || se.stalled || !hasWaiting(obj)) {
		return p, err
	}
	if err != nil {
		p.renderErr, p.in = err, &inputs{}
	}
	p.in.promoted, p.promoteAt, err = r.promote(ctx, obj)
	p.published = p.in.promoted != nil
	return p, err
}

// renderFailed reports a stage's failed render; the retry comes no later than its gate opens.
func (r *KCLArtifactReconciler) renderFailed(ctx context.Context, obj *kclv1.KCLArtifact, pr produced) (ctrl.Result, error) {
	res, err := r.failed(ctx, obj, pr.renderErr)
	if res.RequeueAfter > 0 {
		res.RequeueAfter = untilGate(res.RequeueAfter, pr.promoteAt)
	}
	return res, err
}

// renderLatest renders the source's current revision, unless the inputs are those of the
// artifact already stored.
func (r *KCLArtifactReconciler) renderLatest(ctx context.Context, obj *kclv1.KCLArtifact, hold *outputHold) (in *inputs, upToDate bool, err error) {
	in, err = r.gatherInputs(ctx, obj)
	if err != nil {
		return nil, false, err
	}
	in.hold = hold
	obj.Status.LastAttemptedRevision = in.source.Revision
	upToDate = in.digest == obj.Status.InputDigest && r.stored(obj, obj.Status.Artifact) || r.waitingFor(obj, in.digest)
	if !upToDate {
		if err := r.build(ctx, obj, in); err != nil {
			return nil, false, err
		}
	}
	return in, upToDate, nil
}

// failed records a failed step: Ready=False with the reason, Stalled when retrying cannot help.
// Transient API errors go back to the queue with backoff; the others wait for the retry interval
// or for a change of their inputs.
func (r *KCLArtifactReconciler) failed(ctx context.Context, obj *kclv1.KCLArtifact, err error) (ctrl.Result, error) {
	if errors.Is(context.Cause(ctx), errSuperseded) {
		// The reconcile that follows says what became of it. It is asked for here as well: the
		// cancelling event may have been an old one, delivered after a resumption.
		ctrl.LoggerFrom(ctx).Info("reconciliation cancelled: the KCLArtifact was deleted or suspended")
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if fairshare.CutShort(ctx, err) {
		// Not a failure of the object's: its namespace held the fast lane past the slice and is
		// now kept out of it; the work goes on in an ordinary place at once, conditions as they were.
		ctrl.LoggerFrom(ctx).Info("reconciliation cut short by the fair share: trying again in an ordinary place", "error", err.Error())
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	var se *stepError
	if !errors.As(err, &se) {
		se = &stepError{reason: meta.FailedReason, err: err, transient: true}
	}
	markFailed(obj, se)
	if se.reason == kclv1.SourceNotReadyReason {
		// Expected while source-controller produces its first artifact: nobody is paged for it.
		ctrl.LoggerFrom(ctx).Info("waiting for the source", "reason", se.reason, "message", se.Error())
	} else {
		r.event(obj, eventWarning, se.reason, se.Error())
		ctrl.LoggerFrom(ctx).Error(se.err, "reconciliation failed", "reason", se.reason)
	}
	switch {
	case se.stalled:
		// Only a new generation can help: no requeue, and the error is terminal.
		return ctrl.Result{}, reconcile.TerminalError(se)
	case se.transient:
		return ctrl.Result{}, se
	}
	return ctrl.Result{RequeueAfter: r.Bounds.retry(obj, r.failures.add(obj))}, nil
}

// stepError is a failure with the condition reason that names it.
type stepError struct {
	reason    string
	err       error
	stalled   bool // retrying cannot help until the spec changes
	transient bool // retry with backoff
}

func (e *stepError) Error() string { return e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

func fail(reason string, err error) *stepError { return &stepError{reason: reason, err: err} }

func failf(reason, format string, args ...any) *stepError {
	return fail(reason, fmt.Errorf(format, args...))
}
