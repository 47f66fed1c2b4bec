package controller

import (
	"context"
	"fmt"
	"regexp"
	"slices"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kustomization"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
	"github.com/kcl-flux/kcl-artifact-controller/internal/remediation"
)

// Deploy phases: an artifact whose objects are all in main is applied by one Kustomization named
// after the KCLArtifact, at the artifact's root, as it always was. One with pre or post objects
// holds a directory per phase, each applied by its own Kustomization, chained with dependsOn:
// <name>-pre (wait, force: its Jobs are recreated, so run, for every new artifact), <name>, and
// <name>-post (wait, force). kustomize-controller does the ordering; nothing runs here.

// phaseStatuses are the phases of an artifact with these object counts, in order: nil for an
// artifact that is not phased (all its objects in main, at its root).
func phaseStatuses(obj *kclv1.KCLArtifact, counts map[phases.Phase]int, phased bool) []kclv1.PhaseStatus {
	if !phased {
		return nil
	}
	var out []kclv1.PhaseStatus
	for _, p := range phases.All {
		if counts[p] == 0 {
			continue
		}
		s := kclv1.PhaseStatus{Name: string(p), Objects: counts[p], Kustomization: kustomization.Name(obj, p)}
		// the state is carried over until the Kustomization says otherwise
		if i := slices.IndexFunc(obj.Status.Phases, func(o kclv1.PhaseStatus) bool { return o.Name == s.Name }); i >= 0 {
			s.State, s.Message = obj.Status.Phases[i].State, obj.Status.Phases[i].Message
		}
		out = append(out, s)
	}
	return out
}

// phaseCounts counts parsed objects per phase (a pinned artifact read back).
func phaseCounts(objs []*unstructured.Unstructured) map[phases.Phase]int {
	counts := map[phases.Phase]int{}
	for _, o := range objs {
		counts[manifests.PhaseOf(o)]++
	}
	return counts
}

// phaseBefore is the present phase applied before p, "" for none.
func phaseBefore(obj *kclv1.KCLArtifact, p phases.Phase) phases.Phase {
	var before phases.Phase
	for _, q := range presentPhases(obj) {
		if q == p {
			return before
		}
		before = q
	}
	return before
}

// presentPhases are the phases to apply, as their Kustomizations apply them: those of
// status.phases, or main alone; in a rollback to an artifact holding its rollback phases apart,
// pre and post are those (phases.InRollback).
func presentPhases(obj *kclv1.KCLArtifact) []phases.Phase {
	if len(obj.Status.Phases) == 0 {
		return []phases.Phase{phases.Main}
	}
	apart := false
	if q := remediation.RolledBack(obj); q != nil {
		apart = q.RollbackPhasesApart
	}
	var out []phases.Phase
	for _, s := range obj.Status.Phases {
		p := phases.Phase(s.Name)
		if apart {
			p = phases.InRollback(p)
		}
		out = append(out, p)
	}
	return out
}

// phaseSpec is the Kustomization spec of one phase; after is the phase applied before it ("" for
// none).
func phaseSpec(obj *kclv1.KCLArtifact, p, after phases.Phase) kustomizev1.KustomizationSpec {
	spec := kustomization.Spec(obj)
	if len(obj.Status.Phases) == 0 {
		return spec
	}
	spec.Path = "./" + phases.Dir(p)
	spec.DependsOn = slices.Clone(spec.DependsOn)
	if after != "" {
		spec.DependsOn = append(spec.DependsOn, kustomizev1.DependencyReference{Name: kustomization.Name(obj, after)})
	}
	switch phases.Base(p) {
	case phases.Pre, phases.Post:
		// a phase is done when its Jobs completed; a Job's template is immutable, so the new
		// revision annotation on it needs a recreation
		spec.Wait, spec.Force = true, true
	case phases.Main:
		// the post phase must find main rolled out, not merely applied
		spec.Wait = spec.Wait || slices.ContainsFunc(presentPhases(obj), func(q phases.Phase) bool { return phases.Base(q) == phases.Post })
	}
	if t := phaseTemplate(obj, phases.Base(p)); t != nil && t.Timeout != nil {
		spec.Timeout = t.Timeout
	}
	return spec
}

func phaseTemplate(obj *kclv1.KCLArtifact, p phases.Phase) *kclv1.PhaseTemplate {
	t := obj.Spec.Kustomization
	if t == nil || t.Phases == nil {
		return nil
	}
	switch p {
	case phases.Pre:
		return t.Phases.Pre
	case phases.Post:
		return t.Phases.Post
	default:
		return t.Phases.Main
	}
}

// deleteAbsentPhases deletes the Kustomizations of phases not to apply (their deletion policy,
// from the template, decides what happens to their objects).
func (r *KCLArtifactReconciler) deleteAbsentPhases(ctx context.Context, obj *kclv1.KCLArtifact) error {
	present := presentPhases(obj)
	for _, p := range phases.Generated {
		if !slices.Contains(present, p) {
			if err := r.deleteGenerated(ctx, obj, &kustomizev1.Kustomization{}, kustomization.Name(obj, p)); err != nil {
				return err
			}
		}
	}
	return nil
}

// publishPhases applies the Kustomization of every present phase and returns them live, in
// phase order.
func (r *KCLArtifactReconciler) publishPhases(ctx context.Context, obj *kclv1.KCLArtifact) ([]*kustomizev1.Kustomization, error) {
	var live []*kustomizev1.Kustomization
	var after phases.Phase
	for i, p := range presentPhases(obj) {
		ks, err := apply(ctx, r, obj, &kustomizev1.Kustomization{
			ObjectMeta: generatedMetaNamed(obj, kustomization.Name(obj, p)), Spec: r.Bounds.kustomization(phaseSpec(obj, p, after))})
		if err != nil {
			return nil, err
		}
		if i < len(obj.Status.Phases) {
			obj.Status.Phases[i].Kustomization = ks.Name
		}
		live, after = append(live, ks), p
	}
	main := live[0]
	for _, ks := range live {
		if ks.Name == obj.GetName() {
			main = ks
		}
	}
	obj.Status.KustomizationRef = &meta.NamespacedObjectReference{Name: main.Name, Namespace: main.Namespace}
	return live, nil
}

// mirrorPhases sets each phase's state from its Kustomization, status.phase, and
// KustomizationReady: ready when every phase applied the current artifact, failed as soon as one
// phase failed. It returns the phases that newly failed.
func (r *KCLArtifactReconciler) mirrorPhases(ctx context.Context, obj *kclv1.KCLArtifact, live []*kustomizev1.Kustomization) []kclv1.PhaseStatus {
	var newlyFailed []kclv1.PhaseStatus
	for i, ks := range live {
		s := &obj.Status.Phases[i]
		was := *s
		s.State, s.Message = phaseState(obj, ks, was.State == kclv1.PhaseReady)
		if s.State == kclv1.PhaseFailed && s.Name != string(phases.Main) {
			if why := r.failedJob(ctx, ks); why != "" {
				s.Message = why
			}
		}
		if s.State == kclv1.PhaseFailed && (was.State != kclv1.PhaseFailed || was.Message != s.Message) {
			newlyFailed = append(newlyFailed, *s)
		}
	}
	first := firstPhase(obj.Status.Phases, func(s kclv1.PhaseStatus) bool { return s.State == kclv1.PhaseFailed })
	if first == nil {
		first = firstPhase(obj.Status.Phases, func(s kclv1.PhaseStatus) bool { return s.State != kclv1.PhaseReady })
	}
	switch {
	case first == nil:
		obj.Status.Phase = kclv1.PhaseReady
		conditions.MarkTrue(obj, kclv1.KustomizationReadyCondition, meta.SucceededReason,
			"every phase applied the current artifact: %s", phaseNames(obj))
	case first.State == kclv1.PhaseFailed:
		obj.Status.Phase = first.Name + ": " + first.State
		conditions.MarkFalse(obj, kclv1.KustomizationReadyCondition, kclv1.PhaseFailedReason,
			"phase %s (Kustomization %s): %s", first.Name, first.Kustomization, first.Message)
	default:
		obj.Status.Phase = first.Name + ": " + first.State
		conditions.MarkUnknown(obj, kclv1.KustomizationReadyCondition, meta.ProgressingReason,
			"phase %s (Kustomization %s): %s", first.Name, first.Kustomization, first.Message)
	}
	return newlyFailed
}

func firstPhase(all []kclv1.PhaseStatus, match func(kclv1.PhaseStatus) bool) *kclv1.PhaseStatus {
	for i := range all {
		if match(all[i]) {
			return &all[i]
		}
	}
	return nil
}

func phaseNames(obj *kclv1.KCLArtifact) string {
	var s string
	for i, p := range obj.Status.Phases {
		if i > 0 {
			s += ", "
		}
		s += p.Name
	}
	return s
}

// phaseState reads a phase's Kustomization the way mirrorKustomization does for the only one.
// kustomize-controller's progress reports (several status writes per apply) change nothing here:
// a phase applying says so until it is done, and one that was Ready (wasReady) stays Ready while
// reconciled again; one that failed at the applied revision is not Ready again by being retried.
func phaseState(obj *kclv1.KCLArtifact, ks *kustomizev1.Kustomization, wasReady bool) (state, message string) {
	want := obj.Status.Artifact.Revision
	ready := conditions.Get(ks, meta.ReadyCondition)
	applied := ks.Status.LastAppliedRevision == want
	switch {
	case !kustomizeObserved(ks, ready):
		return kclv1.PhaseApplying, waitingForKustomizeController
	case ready.Status == metav1.ConditionTrue && applied:
		return kclv1.PhaseReady, withoutRevision(ready.Message, want)
	case inProgress(ready) && applied && wasReady:
		return kclv1.PhaseReady, appliedMessage
	case ready.Reason == meta.DependencyNotReadyReason:
		return kclv1.PhaseWaiting, ready.Message
	case ready.Status == metav1.ConditionFalse && ks.Status.LastAttemptedRevision == want:
		return kclv1.PhaseFailed, ready.Message
	case ks.Spec.Suspend:
		return kclv1.PhaseWaiting, fmt.Sprintf("Kustomization %s is suspended", ks.Name)
	default:
		return kclv1.PhaseApplying, waitingForKustomizeController
	}
}

const waitingForKustomizeController = "waiting for kustomize-controller"

// appliedMessage stands for kustomize-controller's "Applied revision: <revision>" when the
// revision is the current artifact's: status.artifact.revision says which it is, and a message
// that repeats it costs every status write of the KCLArtifact its length.
const appliedMessage = "Applied the current artifact"

// withoutRevision is a Kustomization's Ready message as the KCLArtifact mirrors it: appliedMessage
// for kustomize-controller's "Applied revision: <rev>" of the current artifact (rev), any other
// message as it is.
func withoutRevision(msg, rev string) string {
	if rev != "" && msg == "Applied revision: "+rev {
		return appliedMessage
	}
	return msg
}

// kustomizeObserved says whether kustomize-controller has reconciled the Kustomization's current
// generation. It records status.observedGeneration only on success; a failure is recorded in the
// Ready condition's observedGeneration, so a Kustomization that never succeeded (a tenant's apply
// refused from the start) has failed at this generation although status says -1.
func kustomizeObserved(ks *kustomizev1.Kustomization, ready *metav1.Condition) bool {
	return ready != nil && (ks.Status.ObservedGeneration == ks.Generation || ready.ObservedGeneration == ks.Generation)
}

// inProgress is kustomize-controller at work on a Kustomization: Ready is Unknown while it
// reconciles, and it says nothing of the outcome.
func inProgress(ready *metav1.Condition) bool {
	return ready != nil && ready.Status == metav1.ConditionUnknown && ready.Reason == meta.ProgressingReason
}

// failedJobRef finds the Jobs kstatus reported failed in a health check message.
var failedJobRef = regexp.MustCompile(`Job/([a-z0-9.-]+)/([a-z0-9.-]+) status: 'Failed'`)

// failedJob says which Job of a failed phase failed and why, from the Job's Failed condition
// ("" when the message names none, or the Job is elsewhere: on a remote cluster, or gone).
func (r *KCLArtifactReconciler) failedJob(ctx context.Context, ks *kustomizev1.Kustomization) string {
	if ks.Spec.KubeConfig != nil {
		return ""
	}
	m := failedJobRef.FindStringSubmatch(conditions.GetMessage(ks, meta.ReadyCondition))
	if m == nil {
		return ""
	}
	// never through the cache: that would list and watch every Job of the cluster
	if r.APIReader == nil {
		return ""
	}
	job := &batchv1.Job{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: m[1], Name: m[2]}, job); err != nil {
		if !apierrors.IsNotFound(err) {
			return ""
		}
		return fmt.Sprintf("Job %s/%s failed and is gone", m[1], m[2])
	}
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return fmt.Sprintf("Job %s/%s failed: %s: %s", m[1], m[2], c.Reason, c.Message)
		}
	}
	return ""
}
