package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kustomization"
	"github.com/kcl-flux/kcl-artifact-controller/internal/managedfields"
)

// The generated objects are the controller's (issue 53): their spec, labels and owner references
// are what the KCLArtifact says, and a change by anyone else is drift, put back at once. A
// namespace editor who may write Kustomizations (Flux's flux-edit) must not change how an
// approved artifact is applied (spec.patches, targetNamespace, serviceAccountName), hide it from
// its shard, or keep it suspended.
//
// Server-side apply alone does not put it back: fields another manager set stay, since the apply
// does not own them. The fields other managers own there are handed to the controller's apply
// manager first (a write of metadata.managedFields only, locked to the resourceVersion read), so
// that the apply that follows removes those it does not set and sets the others back, and leaves
// the apply manager the only owner, as it is after an apply on an untouched object. Subresources
// are not taken: kustomize-controller writes the Kustomization's status, and its finalizer
// (metadata.finalizers) and annotations (reconcile requests) are not drift.

// reclaim reads a generated object around the cache (whose copy has no managed fields, and for
// a Kustomization no spec) when it is not as this controller's last apply left it, or was not
// applied since the start, and hands the fields other managers own under spec, labels and owner
// references to the apply manager (earlier releases' update entries of the controller's own
// manager too). It reports whether the apply must be sent, and the drift to announce once it was:
// no apply is needed for an object found as left (the cache was behind the controller's write)
// whose configuration did not change. desired is the object to apply; cur the cached one, whose
// resourceVersion becomes that of the managed fields' write.
func (r *KCLArtifactReconciler) reclaim(ctx context.Context, desired, cur client.Object, digest string) (bool, managedfields.Drift, error) {
	live, h, err := r.handOverLive(ctx, desired, cur)
	if apierrors.IsNotFound(err) {
		return true, managedfields.Drift{}, nil // deleted meanwhile: the apply creates it again
	}
	if err != nil {
		return false, managedfields.Drift{}, err
	}
	cur.SetResourceVersion(live.GetResourceVersion())
	c, known := r.applied.Get(live.GetUID())
	if !known {
		// the first apply since the start: what changed since the last one is not known, only
		// who owns what
		return true, h.Report, nil
	}
	left := c.AsLeft(live)
	if left && h.Entries == nil && c.Digest == digest {
		return false, managedfields.Drift{}, nil
	}
	report := h.Report
	if !left {
		report.Add(managedfields.Drift{Paths: managedfields.ChangedPaths(desired, live)})
	}
	return true, report, nil
}

// handOverLive reads the object around the cache and writes its managed fields after the
// managedfields.Handover, if they change; read again on a conflict.
func (r *KCLArtifactReconciler) handOverLive(ctx context.Context, desired, cur client.Object) (client.Object, managedfields.Handover, error) {
	live := desired.DeepCopyObject().(client.Object)
	apiVersion := desired.GetObjectKind().GroupVersionKind().GroupVersion().String()
	var h managedfields.Handover
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := r.uncached().Get(ctx, client.ObjectKeyFromObject(cur), live); err != nil {
			return err
		}
		var err error
		if h, err = managedfields.HandOver(live.GetManagedFields(), r.ControllerName, apiVersion); err != nil || h.Entries == nil {
			return err
		}
		return r.writeManagedFields(ctx, live, h.Entries)
	})
	return live, h, err
}

// writeManagedFields replaces the object's managed fields, and nothing else, as long as it is
// still at the resourceVersion they were read at (a conflict otherwise): kustomize-controller's
// status writes change them too.
func (r *KCLArtifactReconciler) writeManagedFields(ctx context.Context, live client.Object, entries []metav1.ManagedFieldsEntry) error {
	body, err := json.Marshal([]map[string]any{
		{"op": "replace", "path": "/metadata/resourceVersion", "value": live.GetResourceVersion()},
		{"op": "replace", "path": "/metadata/managedFields", "value": entries},
	})
	if err != nil {
		return err
	}
	return r.Patch(ctx, live, client.RawPatch(types.JSONPatchType, body), client.FieldOwner(r.ControllerName))
}

// announceDrift records the Warning event of drift put back on o.
func (r *KCLArtifactReconciler) announceDrift(owner *kclv1.KCLArtifact, o client.Object, d managedfields.Drift) {
	if d.Empty() {
		return
	}
	r.event(owner, eventWarning, kclv1.DriftRevertedReason, d.Message(o))
}

// uncached reads around the cache: the API server's answer, or the client's without an APIReader
// (tests of the reconciler alone).
func (r *KCLArtifactReconciler) uncached() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
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
	var drift managedfields.Drift
	if found {
		c, known := r.applied.Get(cur.GetUID())
		left := known && c.AsLeft(cur)
		if left && c.Digest == digest {
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
	r.applied.Record(o, digest)
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

func setTypeMeta(c client.Client, o client.Object) error {
	gvk, err := apiutil.GVKForObject(o, c.Scheme())
	if err != nil {
		return err
	}
	o.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}
