// Package controller reconciles KCLArtifacts: source artifact → KCL render → stored artifact →
// ExternalArtifact → generated Kustomization.
package controller

import (
	"context"
	"errors"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/patch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/reconcile/summarize"
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
		retErr = r.recordOutcome(ctx, obj, patcher, historyKnown, retErr)
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
		// a rejection holds for the whole pipeline, a suspended stage's too: resolved and recorded
		// now, for the other stages to act on; this one acts on it once resumed
		return ctrl.Result{}, r.resolveSuspended(obj)
	}
	// The deadline bounds the pipeline, not the status patch deferred above.
	pipelineCtx, cancel := context.WithTimeout(pipelineCtx, r.Bounds.timeout(obj))
	defer cancel()
	pipelineRan = true
	if err := r.startFromRecord(obj); err != nil {
		return r.failed(pipelineCtx, obj, err)
	}
	historyKnown = true
	// a rejection holds for the whole pipeline whatever becomes of this reconcile (a spec naming
	// invalid objects stops it at its first step): resolved before the steps, recorded with the
	// outcome, acted on by the rejections step
	obj.Status.Rejected = resolveRejections(obj, metav1.Now())
	return r.reconcile(pipelineCtx, obj)
}

// recordOutcome writes what the reconcile found: the history to the store's ledger first, when status
// holds the recorded one (historyKnown), since the status written next is its copy
// (restoreHistory); then status. It returns reconcileErr with what failed here.
func (r *KCLArtifactReconciler) recordOutcome(ctx context.Context, obj *kclv1.KCLArtifact, patcher *patch.StatusPatcher, historyKnown bool, reconcileErr error) error {
	if historyKnown {
		if err := r.Store.RecordHistory(obj, obj.Status.History, obj.Status.Rejected); err != nil {
			reconcileErr = errors.Join(reconcileErr, err)
		}
	}
	if err := r.patchStatus(ctx, obj, patcher, reconcileErr); err != nil && !apierrors.IsNotFound(err) {
		reconcileErr = errors.Join(reconcileErr, err)
	}
	r.writes.Record(client.ObjectKeyFromObject(obj), obj.ResourceVersion)
	return reconcileErr
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
	p := &pipeline{
		// serving a rolled-back artifact is not a failure the next success recovers from
		wasFailing: conditions.IsFalse(obj, meta.ReadyCondition) && conditions.GetReason(obj, meta.ReadyCondition) != kclv1.RolledBackReason,
		// the rendered output this reconcile holds counts against the budget until it is announced
		hold: r.Bounds.outputHold(),
	}
	defer p.hold.release()
	var err error
	for _, s := range r.steps() {
		if err != nil && !s.always {
			continue
		}
		if err != nil && errors.Is(context.Cause(ctx), errSuperseded) {
			break
		}
		if serr := s.run(ctx, obj, p); err == nil && serr != nil {
			err, p.failedStep = serr, s
			ctrl.LoggerFrom(ctx).V(1).Info("reconcile step failed", "step", s.name)
		}
	}
	return r.summarize(ctx, obj, p, err)
}

// steps are the reconcile, in order.
func (r *KCLArtifactReconciler) steps() []step {
	return []step{
		{name: "references", run: r.reconcileReferences},
		{name: "stage", run: r.reconcileStage},
		{name: "reset", run: r.reconcileReset},
		{name: "restore", run: r.reconcileRestore},
		{name: "rejections", run: r.reconcileRejections},
		{name: "exports", run: r.reconcileExports, keepsPublished: true},
		{name: "pin", run: r.reconcilePin, keepsPublished: true},
		{name: "inputs", run: r.reconcileInputs, keepsPublished: true},
		{name: "render", run: r.reconcileRender, keepsPublished: true},
		{name: "promotion", run: r.reconcilePromotion, keepsPublished: true},
		{name: "storage", run: r.reconcileStorage, keepsPublished: true},
		{name: "publish", run: r.reconcilePublish},
		{name: "push", run: r.reconcilePush},
		{name: "health", run: r.reconcileHealth},
		{name: "verify", run: r.reconcileVerify},
		{name: "history", run: r.reconcileHistory, always: true},
	}
}

// reconcileReferences refuses a spec that names invalid objects: nothing is read or published
// until it names valid ones, and the generated objects are left as they are. A valid spec starts
// the reconcile's progress (Reconciling); an invalid one keeps its Stalled condition as it was.
func (r *KCLArtifactReconciler) reconcileReferences(_ context.Context, obj *kclv1.KCLArtifact, _ *pipeline) error {
	if err := checkReferences(obj); err != nil {
		return err
	}
	summarize.Progressing(obj)
	return nil
}
