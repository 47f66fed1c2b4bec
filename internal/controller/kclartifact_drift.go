package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
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

// driftReport says who changed what of a generated object: field paths (spec.patches,
// metadata.labels.<key>), never values, which may hold secrets.
type driftReport struct {
	paths, managers []string
}

func (d *driftReport) add(other driftReport) {
	d.paths = sortedUnion(d.paths, other.paths)
	d.managers = sortedUnion(d.managers, other.managers)
}

func (d driftReport) empty() bool { return len(d.paths) == 0 }

// message is the event's text about object o (a kind and key).
func (d driftReport) message(o client.Object) string {
	by := "a write that left no field manager (a removal)"
	if len(d.managers) > 0 {
		by = strings.Join(d.managers, ", ")
	}
	return fmt.Sprintf("%s %s/%s changed by %s: %s; put back as the KCLArtifact generates it",
		kindOf(o), o.GetNamespace(), o.GetName(), by, strings.Join(d.paths, ", "))
}

// kindOf is o's kind: objects are applied with their type meta set (setTypeMeta).
func kindOf(o client.Object) string {
	if k := o.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	return fmt.Sprintf("%T", o)
}

// reclaim reads a generated object around the cache (whose copy has no managed fields, and for
// a Kustomization no spec) when it is not as this controller's last apply left it, or was not
// applied since the start, and hands the fields other managers own under spec, labels and owner
// references to the apply manager (earlier releases' update entries of the controller's own
// manager too). It reports whether the apply must be sent, and the drift to announce once it was:
// no apply is needed for an object found as left (the cache was behind the controller's write)
// whose configuration did not change. desired is the object to apply; cur the cached one, whose
// resourceVersion becomes that of the managed fields' write.
func (r *KCLArtifactReconciler) reclaim(ctx context.Context, desired, cur client.Object, digest string) (bool, driftReport, error) {
	live, h, err := r.handOverLive(ctx, desired, cur)
	if apierrors.IsNotFound(err) {
		return true, driftReport{}, nil // deleted meanwhile: the apply creates it again
	}
	if err != nil {
		return false, driftReport{}, err
	}
	cur.SetResourceVersion(live.GetResourceVersion())
	c, known := r.applied.get(live.GetUID())
	if !known {
		// the first apply since the start: what changed since the last one is not known, only
		// who owns what
		return true, h.report, nil
	}
	left := c.asLeft(live)
	if left && h.entries == nil && c.digest == digest {
		return false, driftReport{}, nil
	}
	report := h.report
	if !left {
		report.add(driftReport{paths: changedPaths(desired, live)})
	}
	return true, report, nil
}

// handOverLive reads the object around the cache and writes its managed fields after the
// handover, if they change; read again on a conflict.
func (r *KCLArtifactReconciler) handOverLive(ctx context.Context, desired, cur client.Object) (client.Object, handover, error) {
	live := desired.DeepCopyObject().(client.Object)
	apiVersion := desired.GetObjectKind().GroupVersionKind().GroupVersion().String()
	var h handover
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := r.uncached().Get(ctx, client.ObjectKeyFromObject(cur), live); err != nil {
			return err
		}
		var err error
		if h, err = handOver(live.GetManagedFields(), r.ControllerName, apiVersion); err != nil || h.entries == nil {
			return err
		}
		return r.writeManagedFields(ctx, live, h.entries)
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

// handover is the managed fields of a generated object once the controller's apply manager owns
// its spec, labels and owner references alone (entries nil when they are so already), and what
// other managers owned there.
type handover struct {
	entries []metav1.ManagedFieldsEntry
	report  driftReport
}

// handOver computes the managed fields after the handover, from those of the object, which
// migrate first.
func handOver(entries []metav1.ManagedFieldsEntry, self, apiVersion string) (handover, error) {
	var h handover
	out, changed := migrate(entries, self)
	taken := map[string]any{}
	kept := out[:0]
	for _, e := range out {
		if e.Subresource != "" || (e.Manager == self && e.Operation == metav1.ManagedFieldsOperationApply) {
			kept = append(kept, e)
			continue
		}
		set, err := decodeFields(e.FieldsV1)
		if err != nil {
			return h, fmt.Errorf("managed fields of %s: %w", e.Manager, err)
		}
		t := takeSections(set)
		if len(t) == 0 {
			kept = append(kept, e)
			continue
		}
		changed = true
		mergeFields(taken, t)
		if e.Manager != self {
			h.report.add(driftReport{paths: describeFields(t), managers: []string{e.Manager}})
		}
		if len(set) == 0 {
			continue // it owned nothing else
		}
		if e.FieldsV1, err = encodeFields(set); err != nil {
			return h, err
		}
		kept = append(kept, e)
	}
	if !changed {
		return h, nil
	}
	if len(taken) > 0 {
		if err := giveToApply(&kept, taken, self, apiVersion); err != nil {
			return h, err
		}
	}
	h.entries = kept
	return h, nil
}

// migrate copies the managed fields, where, per subresource, the first update entry of the
// controller's own manager becomes an apply entry unless there is one (objects of earlier
// releases, written with CreateOrUpdate): a field dropped from the template is then removed by
// the next apply instead of staying behind, owned by nobody who would remove it.
func migrate(entries []metav1.ManagedFieldsEntry, self string) ([]metav1.ManagedFieldsEntry, bool) {
	applied := map[string]bool{}
	for _, e := range entries {
		if e.Manager == self && e.Operation == metav1.ManagedFieldsOperationApply {
			applied[e.Subresource] = true
		}
	}
	out := make([]metav1.ManagedFieldsEntry, 0, len(entries))
	changed := false
	for _, e := range entries {
		e = *e.DeepCopy()
		if e.Manager == self && e.Operation == metav1.ManagedFieldsOperationUpdate && !applied[e.Subresource] {
			applied[e.Subresource], e.Operation, changed = true, metav1.ManagedFieldsOperationApply, true
		}
		out = append(out, e)
	}
	return out, changed
}

// giveToApply adds the fields to the controller's apply entry of the object (not of a
// subresource), which it creates when there is none.
func giveToApply(entries *[]metav1.ManagedFieldsEntry, fields map[string]any, self, apiVersion string) error {
	i := slices.IndexFunc(*entries, func(e metav1.ManagedFieldsEntry) bool {
		return e.Manager == self && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == ""
	})
	if i < 0 {
		now := metav1.Now()
		*entries = append(*entries, metav1.ManagedFieldsEntry{Manager: self, Operation: metav1.ManagedFieldsOperationApply,
			APIVersion: apiVersion, Time: &now, FieldsType: "FieldsV1"})
		i = len(*entries) - 1
	}
	e := &(*entries)[i]
	mine, err := decodeFields(e.FieldsV1)
	if err != nil {
		return err
	}
	mergeFields(mine, fields)
	e.FieldsV1, err = encodeFields(mine)
	return err
}

func decodeFields(f *metav1.FieldsV1) (map[string]any, error) {
	set := map[string]any{}
	if f == nil || len(f.Raw) == 0 {
		return set, nil
	}
	return set, json.Unmarshal(f.Raw, &set)
}

func encodeFields(set map[string]any) (*metav1.FieldsV1, error) {
	b, err := json.Marshal(set)
	return &metav1.FieldsV1{Raw: b}, err
}

// takeSections removes from a field set the parts of a generated object that are the
// controller's alone (spec, labels, owner references) and returns them as a field set.
func takeSections(set map[string]any) map[string]any {
	taken := map[string]any{}
	if spec, ok := set["f:spec"]; ok {
		taken["f:spec"] = spec
		delete(set, "f:spec")
	}
	md, _ := set["f:metadata"].(map[string]any)
	for _, k := range []string{"f:labels", "f:ownerReferences"} {
		if v, ok := md[k]; ok {
			if taken["f:metadata"] == nil {
				taken["f:metadata"] = map[string]any{}
			}
			taken["f:metadata"].(map[string]any)[k] = v
			delete(md, k)
		}
	}
	if md != nil && len(md) == 0 {
		delete(set, "f:metadata")
	}
	return taken
}

// mergeFields adds the field set from to into.
func mergeFields(into, from map[string]any) {
	for k, v := range from {
		src, srcIsSet := v.(map[string]any)
		dst, dstIsSet := into[k].(map[string]any)
		if srcIsSet && dstIsSet {
			mergeFields(dst, src)
			continue
		}
		if _, ok := into[k]; !ok {
			into[k] = v
		}
	}
}

// describeFields names the fields of a set: spec.<field>, status.<field>,
// metadata.labels.<key>, metadata.ownerReferences.
func describeFields(set map[string]any) []string {
	var paths []string
	children := func(prefix string, node any) {
		m, ok := node.(map[string]any)
		if !ok {
			return
		}
		n := len(paths)
		for k := range m {
			if name, ok := strings.CutPrefix(k, "f:"); ok {
				paths = append(paths, prefix+"."+name)
			}
		}
		if len(paths) == n {
			paths = append(paths, prefix)
		}
	}
	children("spec", set["f:spec"])
	children("status", set["f:status"])
	md, _ := set["f:metadata"].(map[string]any)
	children("metadata.labels", md["f:labels"])
	if _, ok := md["f:ownerReferences"]; ok {
		paths = append(paths, "metadata.ownerReferences")
	}
	slices.Sort(paths)
	return paths
}

// changedPaths names what of live differs from desired, as describeFields does: the fields of
// the spec desired sets (live also has the API server's defaults), the labels and the owner
// references. It finds what a removal left no manager to own.
func changedPaths(desired, live client.Object) []string {
	var paths []string
	want, err1 := runtime.DefaultUnstructuredConverter.ToUnstructured(desired)
	got, err2 := runtime.DefaultUnstructuredConverter.ToUnstructured(live)
	if err1 == nil && err2 == nil {
		ws, _ := want["spec"].(map[string]any)
		gs, _ := got["spec"].(map[string]any)
		for k, v := range ws {
			if !equality.Semantic.DeepEqual(v, gs[k]) {
				paths = append(paths, "spec."+k)
			}
		}
	}
	for k := range maps.Keys(desired.GetLabels()) {
		if v, ok := live.GetLabels()[k]; !ok || v != desired.GetLabels()[k] {
			paths = append(paths, "metadata.labels."+k)
		}
	}
	for k := range maps.Keys(live.GetLabels()) {
		if _, ok := desired.GetLabels()[k]; !ok {
			paths = append(paths, "metadata.labels."+k)
		}
	}
	if !equality.Semantic.DeepEqual(desired.GetOwnerReferences(), live.GetOwnerReferences()) {
		paths = append(paths, "metadata.ownerReferences")
	}
	slices.Sort(paths)
	return paths
}

// statusDrift is who else wrote the status of an object this controller alone writes (the
// ExternalArtifact's), and which fields.
func statusDrift(entries []metav1.ManagedFieldsEntry, self string) driftReport {
	var d driftReport
	for _, e := range entries {
		if e.Subresource != "status" || e.Manager == self {
			continue
		}
		set, err := decodeFields(e.FieldsV1)
		if err != nil || set["f:status"] == nil {
			continue
		}
		d.add(driftReport{paths: describeFields(map[string]any{"f:status": set["f:status"]}), managers: []string{e.Manager}})
	}
	return d
}

// keepPublished puts back what someone else changed of the generated objects when the pipeline
// fails before publishing: they keep applying the last good artifact as the KCLArtifact says,
// and breaking the render (deleting an argument's ConfigMap) does not leave a change of the
// Kustomization standing. Objects as the last apply left them cost nothing; phases are neither
// deleted nor advanced, which is the publish step's.
func (r *KCLArtifactReconciler) keepPublished(ctx context.Context, obj *kclv1.KCLArtifact, cause error) {
	if obj.Status.Artifact == nil || obj.Status.ExternalArtifactRef == nil || ctx.Err() != nil || fairshare.CutShort(ctx, cause) {
		return
	}
	r.Store.SetArtifactURL(obj, obj.Status.Artifact)
	publishCtx, cancel := bounded(ctx, r.Bounds.PublishTimeout)
	defer cancel()
	err := r.publishExternalArtifact(publishCtx, obj)
	if err == nil && obj.KustomizationEnabled() && obj.Status.KustomizationRef != nil {
		_, err = r.publishPhases(publishCtx, obj)
	}
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "keeping the generated objects as published")
	}
}

// announceDrift records the Warning event of drift put back on o.
func (r *KCLArtifactReconciler) announceDrift(owner *kclv1.KCLArtifact, o client.Object, d driftReport) {
	if d.empty() {
		return
	}
	r.event(owner, eventWarning, kclv1.DriftRevertedReason, d.message(o))
}

func sortedUnion(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}
