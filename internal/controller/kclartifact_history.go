package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/server"
)

// recordHistory puts the current artifact first in status.history (a digest seen before moves
// up rather than appearing twice), drops entries whose files are gone and trims it to the limit.
func (r *KCLArtifactReconciler) recordHistory(obj *kclv1.KCLArtifact) {
	a := obj.Status.Artifact
	if a == nil || obj.Spec.PinnedDigest != "" {
		trimHistory(obj)
		return
	}
	entry := kclv1.ArtifactHistoryEntry{
		Digest: a.Digest, Revision: a.Revision, SourceRevision: obj.Status.SourceRevision,
		URL: a.URL, Size: a.Size, Objects: obj.Status.InventoryCount, LastPublished: a.LastUpdateTime,
	}
	h := obj.Status.History
	if len(h) > 0 && h[0].Digest == entry.Digest && h[0].URL == entry.URL {
		trimHistory(obj)
		return
	}
	kept := []kclv1.ArtifactHistoryEntry{entry}
	for _, e := range h {
		if e.Digest != entry.Digest && r.presentIn(obj, e) {
			kept = append(kept, e)
		}
	}
	obj.Status.History = kept
	trimHistory(obj)
}

func trimHistory(obj *kclv1.KCLArtifact) {
	if n := obj.GetHistoryLimit(); len(obj.Status.History) > n {
		obj.Status.History = obj.Status.History[:n]
	}
}

// collectHistory removes the artifacts status.history no longer lists once the retention TTL
// has passed, and returns when the next one may go (zero: none waits). A failure here is logged,
// never fatal: the artifact is served.
func (r *KCLArtifactReconciler) collectHistory(ctx context.Context, obj *kclv1.KCLArtifact) time.Time {
	deleted, next, err := r.Store.Collect(obj, obj.Status.History)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "garbage collection of old artifacts failed")
		return time.Time{}
	}
	if len(deleted) > 0 {
		ctrl.LoggerFrom(ctx).V(1).Info("garbage collected old artifacts", "files", len(deleted))
	}
	return next
}

// pin publishes the kept artifact spec.pinnedDigest names instead of rendering. Unpinning
// renders again: the input digest is cleared, since the pinned artifact is not what the inputs
// render.
func (r *KCLArtifactReconciler) pin(ctx context.Context, obj *kclv1.KCLArtifact) (published bool, err error) {
	i := slices.IndexFunc(obj.Status.History, func(e kclv1.ArtifactHistoryEntry) bool { return e.Digest == obj.Spec.PinnedDigest })
	if i < 0 {
		return false, &stepError{reason: kclv1.PinnedArtifactNotFoundReason, stalled: true, err: fmt.Errorf(
			"spec.pinnedDigest %s is not a kept artifact; kept: %s", obj.Spec.PinnedDigest, keptDigests(obj))}
	}
	h := obj.Status.History[i]
	art := r.Store.ArtifactOf(obj, h)
	if !r.Store.Present(&art) {
		return false, &stepError{reason: kclv1.PinnedArtifactNotFoundReason, stalled: true, err: fmt.Errorf(
			"the pinned artifact %s is no longer in storage", h.Revision)}
	}
	art.Metadata = map[string]string{originRevisionKey: h.SourceRevision}
	moved, err := r.Store.Point(art)
	if err != nil {
		return false, fail(kclv1.StorageFailedReason, err)
	}
	obj.Status.InputDigest = ""
	if cur := obj.Status.Artifact; cur != nil && cur.Digest == art.Digest {
		return false, nil
	}
	if err := r.pinnedInventory(obj, art); err != nil {
		return false, err
	}
	obj.Status.Artifact, obj.Status.SourceRevision = &art, h.SourceRevision
	return moved, nil
}

// pinnedInventory reads the objects of the pinned artifact back, for status.inventory.
func (r *KCLArtifactReconciler) pinnedInventory(obj *kclv1.KCLArtifact, art meta.Artifact) error {
	limit := int64(r.MaxOutput)
	if limit <= 0 {
		limit = 1 << 30
	}
	yaml, err := server.ReadYAML(r.Store.LocalPath(art), limit)
	if err != nil {
		return fail(kclv1.StorageFailedReason, fmt.Errorf("reading the pinned artifact %s: %w", art.Revision, err))
	}
	objs, err := manifests.Parse(yaml, 0)
	if err != nil {
		return fail(kclv1.InvalidOutputReason, err)
	}
	refs := make([]kclv1.ObjectReference, 0, len(objs))
	for _, o := range objs {
		refs = append(refs, manifests.Reference(o))
	}
	obj.Status.Inventory, obj.Status.InventoryCount = manifests.InventoryOf(refs), len(refs)
	obj.Status.Phases = phaseStatuses(obj, phaseCounts(objs))
	return nil
}

func keptDigests(obj *kclv1.KCLArtifact) string {
	if len(obj.Status.History) == 0 {
		return "none"
	}
	var d []string
	for _, e := range obj.Status.History {
		d = append(d, e.Digest+" ("+e.SourceRevision+")")
	}
	return strings.Join(d, ", ")
}

// markPinned reports a KCLArtifact serving a pinned artifact.
func markPinned(obj *kclv1.KCLArtifact) {
	conditions.Delete(obj, meta.ReconcilingCondition)
	conditions.Delete(obj, meta.StalledCondition)
	conditions.MarkTrue(obj, meta.ReadyCondition, kclv1.PinnedReason,
		"pinned to artifact '%s' rendered from %s (spec.pinnedDigest); remove the pin to render again",
		obj.Status.Artifact.Revision, obj.Status.SourceRevision)
}

// presentIn tells whether the artifact of a history entry is still stored.
func (r *KCLArtifactReconciler) presentIn(obj *kclv1.KCLArtifact, e kclv1.ArtifactHistoryEntry) bool {
	a := r.Store.ArtifactOf(obj, e)
	return r.Store.Present(&a)
}
