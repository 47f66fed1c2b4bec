package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
	"github.com/kcl-flux/kcl-artifact-controller/internal/tarball"
)

// recordHistory puts the current artifact first in status.history (a digest seen before moves
// up, with what is known of its health, rather than appearing twice), trims it to the limit and
// marks the entries whose files are gone: they stay listed, so that status says what was lost.
func (r *KCLArtifactReconciler) recordHistory(obj *kclv1.KCLArtifact, record []kclv1.InputValue) {
	if a := obj.Status.Artifact; a != nil && obj.Spec.PinnedDigest == "" {
		entry := kclv1.ArtifactHistoryEntry{
			Digest: a.Digest, Revision: a.Revision, SourceRevision: obj.Status.SourceRevision,
			URL: a.URL, Size: a.Size, Objects: obj.Status.InventoryCount, LastPublished: a.LastUpdateTime,
			Inputs: record,
		}
		if h := obj.Status.History; len(h) == 0 || h[0].Digest != entry.Digest || h[0].URL != entry.URL {
			kept := []kclv1.ArtifactHistoryEntry{entry}
			for _, e := range h {
				if e.Digest == entry.Digest {
					kept[0].Health, kept[0].HealthyAt, kept[0].Failure = e.Health, e.HealthyAt, e.Failure
					if record == nil {
						kept[0].Inputs = e.Inputs // published again as it was: a rollback
					}
					continue
				}
				kept = append(kept, e)
			}
			obj.Status.History = kept
		}
	}
	trimHistory(obj)
	// every URL at the current address, with the object's token (entries of an earlier release
	// have none)
	for i, e := range obj.Status.History {
		obj.Status.History[i].URL = r.Store.ArtifactOf(obj, e).URL
	}
	r.markMissing(obj)
}

// markMissing marks the history entries whose files are gone, or no longer have their digest.
func (r *KCLArtifactReconciler) markMissing(obj *kclv1.KCLArtifact) {
	for i := range obj.Status.History {
		obj.Status.History[i].Missing = !r.presentIn(obj, obj.Status.History[i])
	}
}

// trimHistory keeps historyLimit entries. With remediation, the newest healthy entry is kept
// beyond the limit as well, until a newer one is healthy: it is what a failure rolls back to,
// and newer artifacts published in a row before any proved healthy would otherwise push it out.
func trimHistory(obj *kclv1.KCLArtifact) {
	h, n := obj.Status.History, obj.GetHistoryLimit()
	if len(h) <= n {
		return
	}
	target := -1
	if obj.Spec.Remediation != nil {
		target = slices.IndexFunc(h, func(e kclv1.ArtifactHistoryEntry) bool { return e.Health == kclv1.HealthHealthy })
	}
	kept := h[:n:n]
	if target >= n {
		kept = append(kept, h[target])
	}
	obj.Status.History = kept
}

// collectHistory removes the artifacts status.history no longer lists once the retention TTL
// has passed, and returns when the next one may go (zero: none waits). A failure here is logged,
// never fatal: the artifact is served.
func (r *KCLArtifactReconciler) collectHistory(ctx context.Context, obj *kclv1.KCLArtifact) time.Time {
	kept := obj.Status.History
	if ps := obj.Status.Promotion; ps != nil && len(ps.Waiting) > 0 {
		// the artifacts rendered ahead stay stored until published or dropped
		kept = slices.Clone(kept)
		for _, w := range ps.Waiting {
			kept = append(kept, entryOf(w))
		}
	}
	deleted, next, err := r.Store.Collect(obj, kept)
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
	obj.Status.InputDigest = ""
	published, err = r.publishKept(obj, obj.Status.History[i], false)
	if errors.Is(err, errKeptMissing) {
		return false, &stepError{reason: kclv1.PinnedArtifactNotFoundReason, stalled: true, err: fmt.Errorf(
			"the pinned artifact %s %s", obj.Status.History[i].Revision, whyNotStored(err))}
	}
	return published, err
}

// errKeptMissing is a kept artifact whose file is gone, or no longer has its digest.
var errKeptMissing = errors.New("the artifact is no longer in storage")

// missingHint says why kept artifacts go missing.
const missingHint = " (storage on an emptyDir does not survive the controller's Pod: see config/persistent-storage)"

// whyNotStored says what became of a kept artifact the store refused: gone (the emptyDir hint),
// or damaged or replaced on disk, which no restart explains.
func whyNotStored(err error) string {
	if errors.Is(err, artifactstore.ErrDamaged) || errors.Is(err, artifactstore.ErrNotAFile) {
		return "was damaged or replaced in storage and is not served (" +
			strings.TrimPrefix(err.Error(), errKeptMissing.Error()+": ") + ")"
	}
	return "is no longer in storage" + missingHint
}

// publishKept makes a history entry the current artifact again, its inventory and phases read
// back from its file: those of a deploy, or of a rollback. published tells whether the latest
// link moved.
func (r *KCLArtifactReconciler) publishKept(obj *kclv1.KCLArtifact, h kclv1.ArtifactHistoryEntry, rollback bool) (published bool, err error) {
	art := r.Store.ArtifactOf(obj, h)
	if err := r.Store.CheckFor(obj, art); err != nil {
		return false, fmt.Errorf("%w: %w", errKeptMissing, err)
	}
	art.Metadata = map[string]string{originRevisionKey: h.SourceRevision}
	moved, err := r.Store.Point(art)
	if err != nil {
		return false, fail(kclv1.StorageFailedReason, err)
	}
	if cur := obj.Status.Artifact; cur != nil && cur.Digest == art.Digest && !rollback {
		return false, nil
	}
	apart, err := r.keptInventory(obj, art, rollback)
	if err != nil {
		return false, err
	}
	obj.Status.Artifact, obj.Status.SourceRevision = &art, h.SourceRevision
	if q := obj.Status.Remediation; rollback && q != nil && q.Quarantined != nil {
		q.Quarantined.RollbackPhasesApart = apart
	}
	return moved, nil
}

// keptInventory reads the objects of a kept artifact back, for status.inventory and
// status.phases; a rollback applies the phases the artifact holds for one, when it holds them
// apart (apart).
func (r *KCLArtifactReconciler) keptInventory(obj *kclv1.KCLArtifact, art meta.Artifact, rollback bool) (apart bool, err error) {
	limit := int64(r.MaxOutput)
	if limit <= 0 {
		limit = 1 << 30
	}
	yaml, err := r.readKeptYAML(obj, art, limit)
	if err != nil {
		return false, fail(kclv1.StorageFailedReason, fmt.Errorf("reading the kept artifact %s: %w", art.Revision, err))
	}
	objs, err := manifests.Parse(yaml, 0)
	if err != nil {
		return false, fail(kclv1.InvalidOutputReason, err)
	}
	refs := make([]kclv1.ObjectReference, 0, len(objs))
	for _, o := range objs {
		refs = append(refs, manifests.Reference(o))
	}
	counts := phaseCounts(objs)
	f, err := r.openKept(obj, art)
	if err != nil {
		return false, fail(kclv1.StorageFailedReason, fmt.Errorf("reading the kept artifact %s: %w", art.Revision, err))
	}
	defer f.Close()
	apart, rollbackCounts, err := rollbackPhases(f, limit)
	if err != nil {
		return false, fail(kclv1.StorageFailedReason, fmt.Errorf("reading the kept artifact %s: %w", art.Revision, err))
	}
	phased := phases.Phased(counts) || apart
	if rollback && apart {
		counts[phases.Pre], counts[phases.Post] = rollbackCounts[phases.RollbackPre], rollbackCounts[phases.RollbackPost]
	}
	obj.Status.Inventory, obj.Status.InventoryCount = manifests.InventoryOf(refs), len(refs)
	obj.Status.Phases = phaseStatuses(obj, counts, phased)
	// the exports follow the artifact published: those of a failed one go with it
	exports, err := evalExports(context.Background(), obj, objs, r.Bounds.ExpressionBudget)
	if err != nil {
		return false, err
	}
	obj.Status.Exports = exports
	return apart, nil
}

// rollbackPhases counts the objects of the rollback phases an artifact holds apart; apart is
// false when it holds none (a rollback applies the phases of a deploy).
func rollbackPhases(archive io.ReadSeeker, limit int64) (apart bool, counts map[phases.Phase]int, err error) {
	counts = map[phases.Phase]int{}
	for _, p := range []phases.Phase{phases.RollbackPre, phases.RollbackPost} {
		content, found, err := tarball.ReadFile(archive, phases.Dir(p)+"/"+manifests.FileName, limit)
		if err != nil {
			return false, nil, err
		}
		if !found {
			continue
		}
		apart = true
		objs, err := manifests.Parse(content, 0)
		if err != nil {
			return false, nil, err
		}
		counts[p] = len(objs)
	}
	return apart, counts, nil
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
	return r.Store.CheckFor(obj, r.Store.ArtifactOf(obj, e)) == nil
}
