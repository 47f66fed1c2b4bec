package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"strings"
	"sync"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kustomization"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
)

// publish points the ExternalArtifact at the current artifact and brings the generated
// Kustomizations, one per deploy phase, in line with the template (or orphans them when
// generation is off). It returns the live Kustomizations in phase order. The Kustomizations of
// phases the artifact does not have are deleted before the ExternalArtifact moves: none of them
// applies a directory of the new artifact (a deploy's hooks in a rollback).
func (r *KCLArtifactReconciler) publish(ctx context.Context, obj *kclv1.KCLArtifact) ([]*kustomizev1.Kustomization, error) {
	if obj.KustomizationEnabled() {
		if err := r.deleteAbsentPhases(ctx, obj); err != nil {
			return nil, fail(kclv1.PublishFailedReason, err)
		}
	}
	if err := r.publishExternalArtifact(ctx, obj); err != nil {
		return nil, fail(kclv1.PublishFailedReason, err)
	}
	if !obj.KustomizationEnabled() {
		for _, p := range phases.Generated {
			if err := r.orphanKustomization(ctx, obj, p); err != nil {
				return nil, fail(kclv1.PublishFailedReason, err)
			}
		}
		obj.Status.KustomizationRef, obj.Status.Phase = nil, ""
		for i := range obj.Status.Phases {
			obj.Status.Phases[i].State, obj.Status.Phases[i].Message = "", ""
		}
		conditions.Delete(obj, kclv1.KustomizationReadyCondition)
		return nil, nil
	}
	live, err := r.publishPhases(ctx, obj)
	if err != nil {
		return nil, fail(kclv1.PublishFailedReason, err)
	}
	if len(obj.Status.Phases) == 0 {
		obj.Status.Phase = ""
		before := conditions.Get(obj, kclv1.KustomizationReadyCondition).DeepCopy()
		mirrorKustomization(obj, live[0])
		r.announceRefusal(obj, before, live[0])
		return live, nil
	}
	for _, s := range r.mirrorPhases(ctx, obj, live) {
		r.event(obj, eventWarning, kclv1.PhaseFailedReason,
			fmt.Sprintf("phase %s (Kustomization %s): %s", s.Name, s.Kustomization, s.Message))
	}
	if err := r.advancePhases(ctx, obj, live); err != nil {
		return nil, err
	}
	return live, nil
}

func (r *KCLArtifactReconciler) publishExternalArtifact(ctx context.Context, obj *kclv1.KCLArtifact) error {
	ea := &sourcev1.ExternalArtifact{ObjectMeta: generatedMeta(obj)}
	ea.Spec.SourceRef = &meta.NamespacedObjectKindReference{
		APIVersion: kclv1.GroupVersion.String(), Kind: kclv1.KCLArtifactKind,
		Name: obj.GetName(), Namespace: obj.GetNamespace(),
	}
	live := externalArtifactMeta()
	err := r.Get(ctx, client.ObjectKeyFromObject(ea), live)
	sent, err := applyOver(ctx, r, obj, ea, live, err)
	if err != nil {
		return err
	}
	if sent {
		// the apply answered with the whole object: its status is known at its resourceVersion
		r.applied.sawStatus(ea.UID, ea.ResourceVersion, live.ResourceVersion, ea.Status.Conditions, statusDigest(ea.Status))
		live.ObjectMeta = ea.ObjectMeta
	}
	obj.Status.ExternalArtifactRef = &meta.NamespacedObjectReference{Name: ea.Name, Namespace: ea.Namespace}
	return r.writeExternalArtifactStatus(ctx, obj, live)
}

// externalArtifactMeta is an ExternalArtifact as the cache holds it: its metadata.
func externalArtifactMeta() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(sourcev1.GroupVersion.WithKind(sourcev1.ExternalArtifactKind))
	return m
}

// writeExternalArtifactStatus writes the artifact and Ready to the ExternalArtifact's status,
// only when they differ from what it shows. The cache holds the metadata of ExternalArtifacts
// only: what the status shows is what this controller last wrote or read of it, as long as the
// live resourceVersion is the one of that write or read (or the one before it, in a cache behind
// our write). Otherwise (the first publish of the object since the start, or someone else wrote
// it) it is read from the API server. A status someone else wrote is put back, with a Warning
// event naming them.
func (r *KCLArtifactReconciler) writeExternalArtifactStatus(ctx context.Context, obj *kclv1.KCLArtifact, live *metav1.PartialObjectMetadata) error {
	known, ok := r.applied.statusAt(live.UID, live.ResourceVersion)
	var drift driftReport
	if !ok {
		cur := &sourcev1.ExternalArtifact{}
		if err := r.uncached().Get(ctx, client.ObjectKeyFromObject(live), cur); err != nil {
			return err
		}
		known = r.applied.sawStatus(cur.UID, cur.ResourceVersion, "", cur.Status.Conditions, statusDigest(cur.Status))
		drift = statusDrift(cur.ManagedFields, r.ControllerName)
	}
	want := &sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: live.Name, Namespace: live.Namespace}}
	want.Status.Artifact = obj.Status.Artifact.DeepCopy()
	// Ready is the only condition this controller writes: its transition time is kept, any
	// other is someone else's
	for _, c := range known.conditions {
		if c.Type == meta.ReadyCondition {
			want.Status.Conditions = append(want.Status.Conditions, *c.DeepCopy())
		}
	}
	conditions.MarkTrue(want, meta.ReadyCondition, meta.SucceededReason,
		"artifact %s rendered by KCLArtifact %s", want.Status.Artifact.Revision, obj.GetName())
	digest := statusDigest(want.Status)
	if digest == known.digest {
		return nil
	}
	// The status is replaced whole by a JSON patch, not server-side applied as the object is: we
	// alone write it, and an apply cost the API server 1.5 ms more CPU per write, a tenth of its
	// work in a re-publish (docs/benchmarks.md#scale). Not a merge patch either, which would keep
	// keys the new artifact does not have.
	data, err := json.Marshal([]map[string]any{{"op": "add", "path": "/status", "value": want.Status}})
	if err != nil {
		return err
	}
	rv, err := sendStatus(ctx, r.Client, want, client.RawPatch(types.JSONPatchType, data),
		&client.SubResourcePatchOptions{PatchOptions: client.PatchOptions{FieldManager: r.ControllerName}})
	if err != nil {
		return err
	}
	// the patch replaced the status whole: it is what was sent
	r.applied.sawStatus(live.UID, rv, known.rv, want.Status.Conditions, digest)
	want.SetGroupVersionKind(sourcev1.GroupVersion.WithKind(sourcev1.ExternalArtifactKind))
	r.announceDrift(obj, want, drift)
	return nil
}

// uncached reads around the cache: the API server's answer, or the client's without an APIReader
// (tests of the reconciler alone).
func (r *KCLArtifactReconciler) uncached() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// statusDigest identifies a status by its JSON form, as the API server stores it (times to the
// second).
func statusDigest(status any) [sha256.Size]byte {
	b, err := json.Marshal(status)
	if err != nil {
		return [sha256.Size]byte{}
	}
	return sha256.Sum256(b)
}

// orphanKustomization removes the generated Kustomization of a phase and leaves what it applied
// in place: turning generation off hands the objects to a Kustomization of the user's own, which
// adopts them, rather than deleting the workloads in between.
func (r *KCLArtifactReconciler) orphanKustomization(ctx context.Context, obj *kclv1.KCLArtifact, p phases.Phase) error {
	ks := &kustomizev1.Kustomization{}
	err := r.Get(ctx, client.ObjectKey{Namespace: obj.GetNamespace(), Name: kustomization.Name(obj, p)}, ks)
	if apierrors.IsNotFound(err) || (err == nil && !metav1.IsControlledBy(ks, obj)) {
		return nil
	}
	if err != nil {
		return err
	}
	if !ks.GetDeletionTimestamp().IsZero() {
		return nil
	}
	if ks.Spec.DeletionPolicy != kustomizev1.DeletionPolicyOrphan {
		// kustomize-controller reads the policy when it finalizes the deleted object: set first.
		spec := phaseSpec(obj, p, phaseBefore(obj, p))
		spec.DeletionPolicy = kustomizev1.DeletionPolicyOrphan
		if _, err := apply(ctx, r, obj, &kustomizev1.Kustomization{ObjectMeta: generatedMetaNamed(obj, ks.Name), Spec: spec}); err != nil {
			return err
		}
	}
	r.applied.forget(ks.UID)
	return client.IgnoreNotFound(r.Delete(ctx, ks))
}

// mirrorKustomization copies the Kustomization's readiness into KustomizationReady, as long as it
// is about the current artifact: a suspended or not yet updated Kustomization that applied an older
// one does not make the KCLArtifact look applied. kustomize-controller's progress reports are not
// copied: each would be a status write of the KCLArtifact saying nothing new (applied stays
// applied while reconciled again, applying says so until the outcome).
func mirrorKustomization(obj *kclv1.KCLArtifact, ks *kustomizev1.Kustomization) {
	ready := conditions.Get(ks, meta.ReadyCondition)
	want := ""
	if obj.Status.Artifact != nil {
		want = obj.Status.Artifact.Revision
	}
	applied := ks.Status.LastAppliedRevision == want
	switch {
	case ks.Spec.Suspend && !applied:
		conditions.MarkUnknown(obj, kclv1.KustomizationReadyCondition, kclv1.KustomizationSuspendedReason,
			"Kustomization %s is suspended (spec.kustomization.suspend): it last applied %q, not the current artifact",
			ks.Name, ks.Status.LastAppliedRevision)
	case inProgress(ready) && applied && ks.Status.ObservedGeneration == ks.Generation &&
		conditions.IsTrue(obj, kclv1.KustomizationReadyCondition):
		// applied, and reconciled again: applied until kustomize-controller says otherwise
	case !kustomizeObserved(ks, ready) || inProgress(ready) || (ready.Status == metav1.ConditionTrue && !applied):
		conditions.MarkUnknown(obj, kclv1.KustomizationReadyCondition, meta.ProgressingReason,
			"waiting for kustomize-controller to apply %s with Kustomization %s", want, ks.Name)
	default:
		c := ready.DeepCopy()
		c.Type = kclv1.KustomizationReadyCondition
		c.ObservedGeneration = obj.Generation
		conditions.Set(obj, c)
	}
}

// announceRefusal records a Warning event when the Kustomization newly fails (reason or message
// changed since before): what kustomize-controller refused, such as an object the impersonated
// account may not apply, reaches alerting as the KCLArtifact's, as a failed phase's does. Waiting
// for a dependency is no failure.
func (r *KCLArtifactReconciler) announceRefusal(obj *kclv1.KCLArtifact, before *metav1.Condition, ks *kustomizev1.Kustomization) {
	c := conditions.Get(obj, kclv1.KustomizationReadyCondition)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason == meta.DependencyNotReadyReason {
		return
	}
	if before != nil && before.Status == c.Status && before.Reason == c.Reason && before.Message == c.Message {
		return
	}
	r.event(obj, eventWarning, c.Reason, fmt.Sprintf("Kustomization %s/%s: %s", ks.Namespace, ks.Name, c.Message))
}

func generatedMeta(obj *kclv1.KCLArtifact) metav1.ObjectMeta {
	return generatedMetaNamed(obj, obj.GetName())
}

func generatedMetaNamed(obj *kclv1.KCLArtifact, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: obj.GetNamespace(), Labels: generatedLabels(obj)}
}

// generatedLabels are the KCLArtifact's labels, so that a sharded kustomize-controller
// (sharding.fluxcd.io/key) and label selectors find the generated objects beside it, without the
// toolkit's own bookkeeping labels (a Kustomization that applied the KCLArtifact did not apply
// these), plus the generated-by label.
func generatedLabels(obj *kclv1.KCLArtifact) map[string]string {
	labels := map[string]string{}
	for k, v := range obj.GetLabels() {
		if domain, _, ok := strings.Cut(k, "/"); ok && strings.HasSuffix(domain, "toolkit.fluxcd.io") {
			continue
		}
		labels[k] = v
	}
	labels[kustomization.GeneratedLabel] = obj.GetName()
	return labels
}

// apply writes a generated object by server-side apply as this controller's field manager. Its
// spec, labels and owner references are the controller's: what someone else changed there is
// put back (reclaim). An object of the same name that this KCLArtifact does not control is never
// taken over. It returns the live object, status included. An apply that would change nothing
// is not sent: the same configuration was applied to this generation of the object before, and
// its labels and owner references are as that apply left them.
func apply[T client.Object](ctx context.Context, r *KCLArtifactReconciler, owner *kclv1.KCLArtifact, o T) (T, error) {
	cur := o.DeepCopyObject().(T)
	err := r.Get(ctx, client.ObjectKeyFromObject(o), cur)
	sent, err := applyOver(ctx, r, owner, o, cur, err)
	if sent {
		return o, err
	}
	return cur, err
}

// applyOver applies o over cur, the cached object (or its metadata) that the cache read getErr
// answered, and reports whether it sent the apply: o is then the live object. An object not as
// the last apply left it (someone else changed it, or the cache is behind), or not applied since
// the start, is reclaimed first; one as left costs no read.
func applyOver(ctx context.Context, r *KCLArtifactReconciler, owner *kclv1.KCLArtifact, o, cur client.Object, getErr error) (bool, error) {
	found := getErr == nil
	switch {
	case apierrors.IsNotFound(getErr):
	case getErr != nil:
		return false, getErr
	case !metav1.IsControlledBy(cur, owner):
		return false, fmt.Errorf("%T %s/%s exists and is not managed by this KCLArtifact", o, o.GetNamespace(), o.GetName())
	}
	if err := controllerutil.SetControllerReference(owner, o, r.Client.Scheme()); err != nil {
		return false, err
	}
	if err := setTypeMeta(r.Client, o); err != nil {
		return false, err
	}
	digest, err := configDigest(o)
	if err != nil {
		return false, err
	}
	var drift driftReport
	if found {
		c, known := r.applied.get(cur.GetUID())
		left := known && c.asLeft(cur)
		if left && c.digest == digest {
			return false, nil
		}
		if !left {
			send, d, err := r.reclaim(ctx, o, cur, digest)
			if err != nil || !send {
				return false, err
			}
			drift = d
		}
	}
	if err := r.Patch(ctx, o, client.Apply, client.FieldOwner(r.ControllerName), client.ForceOwnership); err != nil {
		return false, err
	}
	r.applied.record(o, digest)
	r.announceDrift(owner, o, drift)
	return true, nil
}

// configDigest identifies an apply configuration.
func configDigest(o client.Object) (string, error) {
	b, err := json.Marshal(o)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// appliedConfigs remembers what was applied to which generation of each generated object, and
// the labels and owner references the apply left. A spec changed by someone else moves the
// generation, and the next reconcile reclaims the object; labels and owner references are
// compared whole with the cached object (an extra one is drift too). For an object whose status
// the cache does not hold (the ExternalArtifact), it also remembers the status last written or
// read.
type appliedConfigs struct {
	mu sync.Mutex
	m  map[types.UID]appliedConfig
}

// knownStatus is an object's status at resourceVersion rv, as this controller last wrote or read
// it: its digest, and its conditions, the base of the next status (their transition times).
// prev is the resourceVersion before that write, which a cache not yet past it still shows.
type knownStatus struct {
	digest     [sha256.Size]byte
	conditions []metav1.Condition
	rv, prev   string
}

type appliedConfig struct {
	digest     string
	generation int64
	labels     map[string]string
	// owners identifies the owner references (ownersDigest): there is one, whose copy would
	// cost a hundred bytes per object
	owners uint64
	// status is kept in the same entry (a second map keyed by UID cost as much again), for the
	// objects whose status is not cached
	status *knownStatus
}

// asLeft reports whether live is as the apply recorded left it: the same generation, labels and
// owner references.
func (c appliedConfig) asLeft(live client.Object) bool {
	return c.generation == live.GetGeneration() && maps.Equal(c.labels, live.GetLabels()) &&
		c.owners == ownersDigest(live.GetOwnerReferences())
}

// ownersDigest identifies owner references by what an owner reference says.
func ownersDigest(refs []metav1.OwnerReference) uint64 {
	h := fnv.New64a()
	for _, o := range refs {
		fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%v\x00%v\x00", o.APIVersion, o.Kind, o.Name, o.UID,
			ptr.Deref(o.Controller, false), ptr.Deref(o.BlockOwnerDeletion, false))
		// nil and false differ on the object
		fmt.Fprintf(h, "%t%t\x00", o.Controller == nil, o.BlockOwnerDeletion == nil)
	}
	return h.Sum64()
}

// get returns what was applied to the object last.
func (a *appliedConfigs) get(uid types.UID) (appliedConfig, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.m[uid]
	return c, ok
}

func (a *appliedConfigs) record(applied client.Object, digest string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.m == nil {
		a.m = map[types.UID]appliedConfig{}
	}
	a.m[applied.GetUID()] = appliedConfig{digest: digest, generation: applied.GetGeneration(), labels: applied.GetLabels(),
		owners: ownersDigest(applied.GetOwnerReferences()), status: a.m[applied.GetUID()].status}
}

func (a *appliedConfigs) forget(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.m, uid)
}

// statusAt returns the status known of the object at resourceVersion rv.
func (a *appliedConfigs) statusAt(uid types.UID, rv string) (knownStatus, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.m[uid].status
	if rv == "" || s == nil || (rv != s.rv && rv != s.prev) {
		return knownStatus{}, false
	}
	return *s, true
}

// sawStatus remembers the status of the object at resourceVersion rv (prev: the one before), for
// an object applied before: one not yet applied by this process is reclaimed first, and its
// apply answers with its status.
func (a *appliedConfigs) sawStatus(uid types.UID, rv, prev string, conds []metav1.Condition, digest [sha256.Size]byte) knownStatus {
	s := knownStatus{digest: digest, rv: rv, prev: prev}
	for _, c := range conds {
		s.conditions = append(s.conditions, *c.DeepCopy())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.m[uid]; ok {
		c.status = &s
		a.m[uid] = c
	}
	return s
}

func setTypeMeta(c client.Client, o client.Object) error {
	gvk, err := apiutil.GVKForObject(o, c.Scheme())
	if err != nil {
		return err
	}
	o.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}
