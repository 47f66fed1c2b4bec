package controller

import (
	"context"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// reconcileHistory keeps status.history and the artifacts waiting for a stage's gates to
// historyLimit (the rollback target beyond it), gives every entry its URL at the current address,
// marks the entries whose files are gone (they stay listed, so that status says what was lost)
// and removes the files no longer listed. It runs after a failed step too: what that step stored
// stays listed and bounded.
func (r *KCLArtifactReconciler) reconcileHistory(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	trimHistory(obj)
	trimWaiting(obj)
	// every URL at the current address, with the object's token (entries of an earlier release
	// have none)
	for i, e := range obj.Status.History {
		obj.Status.History[i].URL = r.Store.ArtifactOf(obj, e).URL
	}
	r.markMissing(obj)
	p.collectAt = r.collectHistory(ctx, obj)
	return nil
}

// recordHistory puts the current artifact first in status.history: a digest seen before moves
// up, with what is known of its health, rather than appearing twice.
func recordHistory(obj *kclv1.KCLArtifact, record []kclv1.InputValue) {
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
					kept[0].OCI = e.OCI // where it was pushed; the push step moves the tag back to it
					kept[0].Verification = e.Verification
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
}

// markMissing marks the history entries whose files are gone, or no longer have their digest.
func (r *KCLArtifactReconciler) markMissing(obj *kclv1.KCLArtifact) {
	for i := range obj.Status.History {
		obj.Status.History[i].Missing = !r.Store.Keeps(obj, obj.Status.History[i])
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

// trimWaiting keeps historyLimit artifacts waiting for a stage's gates, the newest.
func trimWaiting(obj *kclv1.KCLArtifact) {
	if ps := obj.Status.Promotion; ps != nil && len(ps.Waiting) > obj.GetHistoryLimit() {
		ps.Waiting = ps.Waiting[:obj.GetHistoryLimit()]
	}
}

// collectHistory removes the artifacts status.history no longer lists once the retention TTL
// has passed, and returns when the next one may go (zero: none waits). A failure here is logged,
// never fatal: the artifact is served.
func (r *KCLArtifactReconciler) collectHistory(ctx context.Context, obj *kclv1.KCLArtifact) time.Time {
	kept := slices.Clone(obj.Status.History)
	// the artifact served stays, listed or not: a publish that failed after it was made current
	// has not listed it yet
	if a := obj.Status.Artifact; a != nil {
		kept = append(kept, kclv1.ArtifactHistoryEntry{Digest: a.Digest, URL: a.Path})
	}
	if ps := obj.Status.Promotion; ps != nil {
		// the artifacts rendered ahead stay stored until published or dropped
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

// entryOf is a waiting artifact as the history entry it becomes once published.
func entryOf(w kclv1.WaitingArtifact) kclv1.ArtifactHistoryEntry {
	e := w.Entry()
	e.LastPublished = metav1.Now()
	return e
}
