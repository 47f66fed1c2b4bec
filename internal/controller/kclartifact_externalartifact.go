package controller

import (
	"context"
	"crypto/sha256"
	"encoding/json"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/managedfields"
	"github.com/kcl-flux/kcl-artifact-controller/internal/patch"
)

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
		r.applied.SawStatus(ea.UID, ea.ResourceVersion, live.ResourceVersion, ea.Status.Conditions, statusDigest(ea.Status))
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
	known, ok := r.applied.StatusAt(live.UID, live.ResourceVersion)
	var drift managedfields.Drift
	if !ok {
		cur := &sourcev1.ExternalArtifact{}
		if err := r.uncached().Get(ctx, client.ObjectKeyFromObject(live), cur); err != nil {
			return err
		}
		known = r.applied.SawStatus(cur.UID, cur.ResourceVersion, "", cur.Status.Conditions, statusDigest(cur.Status))
		drift = managedfields.StatusDrift(cur.ManagedFields, r.ControllerName)
	}
	want := &sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: live.Name, Namespace: live.Namespace}}
	want.Status.Artifact = obj.Status.Artifact.DeepCopy()
	// Ready is the only condition this controller writes: its transition time is kept, any
	// other is someone else's
	for _, c := range known.Conditions {
		if c.Type == meta.ReadyCondition {
			want.Status.Conditions = append(want.Status.Conditions, *c.DeepCopy())
		}
	}
	conditions.MarkTrue(want, meta.ReadyCondition, meta.SucceededReason,
		"artifact %s rendered by KCLArtifact %s", want.Status.Artifact.Revision, obj.GetName())
	digest := statusDigest(want.Status)
	if digest == known.Digest {
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
	rv, err := patch.SendStatus(ctx, r.Client, want, client.RawPatch(types.JSONPatchType, data),
		&client.SubResourcePatchOptions{PatchOptions: client.PatchOptions{FieldManager: r.ControllerName}})
	if err != nil {
		return err
	}
	// the patch replaced the status whole: it is what was sent
	r.applied.SawStatus(live.UID, rv, known.RV, want.Status.Conditions, digest)
	want.SetGroupVersionKind(sourcev1.GroupVersion.WithKind(sourcev1.ExternalArtifactKind))
	r.announceDrift(obj, want, drift)
	return nil
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
