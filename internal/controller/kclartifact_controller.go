// Package controller reconciles KCLArtifacts: source artifact → KCL render → stored artifact →
// ExternalArtifact → generated Kustomization.
package controller

import (
	"context"
	"errors"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
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

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/appliedcache"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/depfetch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/patch"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
	"github.com/kcl-flux/kcl-artifact-controller/internal/reconcile/summarize"
	"github.com/kcl-flux/kcl-artifact-controller/internal/remediation"
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
	applied  appliedcache.Cache
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
		return r.failed(pipelineCtx, obj, kreconcile.Fail(kclv1.StorageFailedReason, err))
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

// reconcile runs the steps in order. A step that fails stops the pipeline, and what was
// published before stays published; the history step runs whatever happened, so that what a
// failed reconcile stored stays listed and bounded. The summary then turns the outcome into
// conditions, events and the requeue.
func (r *KCLArtifactReconciler) reconcile(ctx context.Context, obj *kclv1.KCLArtifact) (ctrl.Result, error) {
	summarize.Progressing(obj)
	p := &pipeline{
		// serving a rolled-back artifact is not a failure the next success recovers from
		wasFailing: conditions.IsFalse(obj, meta.ReadyCondition) && conditions.GetReason(obj, meta.ReadyCondition) != kclv1.RolledBackReason,
		// the rendered output this reconcile holds counts against the budget until it is announced
		hold: r.Bounds.outputHold(),
	}
	defer p.hold.release()
	var res kreconcile.Result
	var err error
	for _, s := range r.steps() {
		if err != nil && !s.always {
			continue
		}
		if err != nil && errors.Is(context.Cause(ctx), errSuperseded) {
			break
		}
		sres, serr := s.run(ctx, obj, p)
		if err == nil {
			err = serr
		}
		res = kreconcile.LowestRequeuingResult(res, sres)
		if res == kreconcile.ResultRequeue && err == nil {
			return ctrl.Result{Requeue: true}, nil
		}
	}
	return r.summarize(ctx, obj, p, err)
}

// step is one concern of the reconcile: it reads the spec fields of that concern, writes its
// status fields, and leaves in the pipeline what the steps after it need.
type step struct {
	name string
	run  func(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) (kreconcile.Result, error)
	// always: the step runs after a failed one too (the failure is the reconcile's).
	always bool
}

// steps are the reconcile, in order.
func (r *KCLArtifactReconciler) steps() []step {
	return []step{
		{name: "spec", run: r.reconcileSpec},
		{name: "reset", run: r.reconcileReset},
		{name: "pin", run: r.reconcilePin},
		{name: "inputs", run: r.reconcileInputs},
		{name: "render", run: r.reconcileRender},
		{name: "promotion", run: r.reconcilePromotion},
		{name: "storage", run: r.reconcileStorage},
		{name: "publish", run: r.reconcilePublish},
		{name: "health", run: r.reconcileHealth},
		{name: "history", run: r.reconcileHistory, always: true},
	}
}

// pipeline is what the steps of one reconcile hand each other.
type pipeline struct {
	// wasFailing: Ready said a failure before this reconcile (a success is then a recovery).
	wasFailing bool
	// hold is the reconcile's part of the output budget (nil: no budget).
	hold *outputHold
	// retryAll (reset step): the Kustomizations' verdicts so far are not counted.
	retryAll bool
	// pinned (pin step): a kept artifact is published instead of a render.
	pinned bool
	// in (inputs step) is what the render depends on; upToDate tells that the artifact stored,
	// or one waiting, is theirs already.
	in       *inputs
	upToDate bool
	// waited: the inputs are up to date only because their artifact waits for a stage's gates.
	waited bool
	// rendered (render step) is a new artifact, stored but not yet the current one;
	// renderErr a failed render a later step may go past (a stage's proven waiting artifact).
	rendered  *rendered
	renderErr error
	// promoted (promotion step) is the waiting artifact a stage published; promoteAt is when a
	// closed gate opens by itself.
	promoted  *promoted
	promoteAt time.Time
	// published: the latest link moved to another artifact, which is announced.
	published bool
	// live (publish step) are the generated Kustomizations, in phase order.
	live []*kustomizev1.Kustomization
	// collectAt (history step) is when an artifact no longer listed may be removed.
	collectAt time.Time
}

// sensitive are the argument values read from Secrets, masked in what events name.
func (p *pipeline) sensitive() []string {
	if p.in == nil {
		return nil
	}
	return p.in.secretValues
}

// record is what the history records of the inputs of the artifact this reconcile published;
// nil otherwise, where the entry keeps what it recorded.
func (p *pipeline) record() []kclv1.InputValue {
	switch {
	case !p.published:
		return nil
	case p.promoted != nil:
		return p.promoted.waiting.Inputs
	case p.in != nil:
		return p.in.record
	}
	return nil
}

// reconcileSpec refuses a spec that names invalid objects or exports what Secrets may give.
func (r *KCLArtifactReconciler) reconcileSpec(_ context.Context, obj *kclv1.KCLArtifact, _ *pipeline) (kreconcile.Result, error) {
	if err := checkReferences(obj); err != nil {
		return kreconcile.ResultEmpty, err
	}
	if err := exportsRefused(obj); err != nil {
		// nothing is rendered, and exports an earlier release published go
		obj.Status.Exports = nil
		return kreconcile.ResultEmpty, err
	}
	return kreconcile.ResultSuccess, nil
}

// summarize turns the outcome of the steps into conditions, events and the requeue.
func (r *KCLArtifactReconciler) summarize(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline, err error) (ctrl.Result, error) {
	if err != nil {
		r.keepPublished(ctx, obj, err)
		return r.failed(ctx, obj, err)
	}
	gate := summarize.Requeue{GateOpens: p.promoteAt}
	if obj.Status.Artifact == nil {
		// a stage whose first artifact waits: nothing published yet
		if p.renderErr != nil {
			return r.renderFailed(ctx, obj, p.renderErr, gate)
		}
		markWaitingFirst(obj)
		return ctrl.Result{RequeueAfter: gate.UntilGate(r.Bounds.interval(obj))}, nil
	}
	switch {
	case p.pinned:
		markPinned(obj)
	case remediation.RolledBack(obj) != nil:
		markRolledBack(obj)
	default:
		markReady(obj, p.upToDate)
	}
	if p.renderErr != nil {
		// what waited was promoted; the render's failure is still the news
		r.announce(obj, p, false)
		return r.renderFailed(ctx, obj, p.renderErr, gate)
	}
	r.announce(obj, p, p.wasFailing)
	r.failures.reset(obj)
	return ctrl.Result{RequeueAfter: summarize.Requeue{Interval: jitter.JitteredIntervalDuration(r.Bounds.interval(obj)),
		GateOpens: p.promoteAt, Collect: p.collectAt}.After()}, nil
}

// renderFailed reports a stage's failed render; the retry comes no later than its gate opens.
func (r *KCLArtifactReconciler) renderFailed(ctx context.Context, obj *kclv1.KCLArtifact, renderErr error, gate summarize.Requeue) (ctrl.Result, error) {
	res, err := r.failed(ctx, obj, renderErr)
	if res.RequeueAfter > 0 {
		res.RequeueAfter = gate.UntilGate(res.RequeueAfter)
	}
	return res, err
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
	se := kreconcile.As(err)
	markFailed(obj, se)
	if se.Reason == kclv1.SourceNotReadyReason {
		// Expected while source-controller produces its first artifact: nobody is paged for it.
		ctrl.LoggerFrom(ctx).Info("waiting for the source", "reason", se.Reason, "message", se.Error())
	} else {
		r.event(obj, eventWarning, se.Reason, se.Error())
		ctrl.LoggerFrom(ctx).Error(se.Err, "reconciliation failed", "reason", se.Reason)
	}
	var retry time.Duration
	if !se.Stalled && !se.Transient {
		retry = r.Bounds.retry(obj, r.failures.add(obj))
	}
	return summarize.FailureResult(se, retry)
}
