package controller

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
)

// A tenant who administers its namespace can write the status subresource of its KCLArtifacts
// (the flux2-multi-tenancy layout binds cluster-admin there). Status is therefore a cache of what
// the controller wrote, never an instruction: before a reconcile acts on it, every artifact it
// names must be a file of this object's own storage directory, with a name the store writes.
// What is not is rewritten and announced; the reconcile then renders again, and the published
// artifact comes from the render.

// artifactFileName is the name the store gives an artifact: its content's sha256, hex.
var artifactFileName = regexp.MustCompile(`^[0-9a-f]{64}\.tar\.gz$`)

// startFromRecord makes status what the controller recorded before the steps read it. A deleted
// object of the same name left its artifacts (its finalizer did not run): none of them is this
// object's to check, pin or publish. Status is a copy for readers, which a namespace admin can
// write: what it names that is not this object's is dropped, and its history is the recorded one.
func (r *KCLArtifactReconciler) startFromRecord(obj *kclv1.KCLArtifact) error {
	if err := r.Store.DropForeign(obj); err != nil {
		return kreconcile.Fail(kclv1.StorageFailedReason, err)
	}
	r.announceRepair(obj, r.repairStatus(obj))
	if err := r.restoreHistory(obj); err != nil {
		return err
	}
	return r.restoreRejections(obj)
}

// restoreRejections starts a reconcile from the releases the controller recorded as rejected (the
// store's ledger), not from status.rejected, which whoever may write the status subresource can
// rewrite and a restored backup can empty: a rejection resolved once keeps the release it was
// resolved to, whatever status says, until the reject annotation stops naming it. A record
// written into status by anyone else is put back, and announced. Without a ledger (storage lost
// with its volume, an emptyDir in a restart; or nothing recorded yet) status.rejected is adopted,
// each record's release resolved again from the entry its digest names where there is one: a
// rejection that only status still holds, its artifact gone, is not silently lifted, and the
// stages that reconcile first after a restart still see it (pipelineRejections).
func (r *KCLArtifactReconciler) restoreRejections(obj *kclv1.KCLArtifact) error {
	recorded, ok, err := r.Store.Rejections(obj)
	if err != nil {
		return kreconcile.Fail(kclv1.StorageFailedReason, err)
	}
	if !ok {
		for i, rec := range obj.Status.Rejected {
			if src, inputs, found := releaseOf(obj, rec.Digest); found {
				obj.Status.Rejected[i].SourceRevision, obj.Status.Rejected[i].Inputs = src, inputs
			}
		}
		return nil
	}
	if equality.Semantic.DeepEqual(recorded, obj.Status.Rejected) || (len(recorded) == 0 && len(obj.Status.Rejected) == 0) {
		return nil
	}
	if len(obj.Status.Rejected) > 0 {
		r.event(obj, eventWarning, kclv1.StatusRepairedReason, fmt.Sprintf(
			"status.rejected of KCLArtifact %s/%s differed from the controller's record: put back as recorded",
			obj.GetNamespace(), obj.GetName()))
	}
	obj.Status.Rejected = slices.Clone(recorded)
	return nil
}

// repairStatus rewrites what status names that is not this object's own, and returns what it
// rewrote, for the Warning event.
func (r *KCLArtifactReconciler) repairStatus(obj *kclv1.KCLArtifact) []string {
	var repaired []string
	if a := obj.Status.Artifact; a != nil && !ownArtifactPath(obj, a.Path) {
		repaired = append(repaired, fmt.Sprintf("status.artifact named %q", a.Path))
		obj.Status.Artifact, obj.Status.InputDigest = nil, ""
	}
	kept := obj.Status.History[:0:0]
	for _, e := range obj.Status.History {
		if !ownArtifactURL(obj, e.URL) {
			repaired = append(repaired, fmt.Sprintf("status.history entry %s named %q", e.Digest, e.URL))
			continue
		}
		kept = append(kept, e)
	}
	if len(repaired) > 0 {
		obj.Status.History = kept
	}
	if ps := obj.Status.Promotion; ps != nil {
		waiting := ps.Waiting[:0:0]
		for _, w := range ps.Waiting {
			if !ownArtifactURL(obj, w.URL) {
				repaired = append(repaired, fmt.Sprintf("status.promotion.waiting entry %s named %q", w.Digest, w.URL))
				continue
			}
			waiting = append(waiting, w)
		}
		ps.Waiting = waiting
	}
	return repaired
}

// announceRepair says what status named and the controller refused to follow.
func (r *KCLArtifactReconciler) announceRepair(obj *kclv1.KCLArtifact, repaired []string) {
	if len(repaired) == 0 {
		return
	}
	r.event(obj, eventWarning, kclv1.StatusRepairedReason, clean(fmt.Sprintf(
		"%s, not an artifact of KCLArtifact %s/%s: removed from status, the artifact is rendered again",
		strings.Join(repaired, "; "), obj.GetNamespace(), obj.GetName())))
}

// ownArtifactPath tells whether p (relative to the storage root) is a file the store writes in
// obj's own directory: never another object's, never the latest link, never a path with dots.
func ownArtifactPath(obj *kclv1.KCLArtifact, p string) bool {
	dir, file := path.Split(p)
	return dir == artifactstore.Dir(obj)+"/" && artifactFileName.MatchString(file)
}

// ownArtifactURL tells whether an artifact URL names a file of obj's own directory, whatever
// address (--storage-adv-addr) it was published under.
func ownArtifactURL(obj *kclv1.KCLArtifact, raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || path.Clean(u.Path) != u.Path {
		return false
	}
	dir, file := path.Split(u.Path)
	return strings.HasSuffix(dir, "/"+artifactstore.Dir(obj)+"/") && artifactFileName.MatchString(file)
}

// provenHistory is obj's history as the controller recorded it in the store (its ledger), which
// no tenant can write; recorded is false when the store has no record of it. An object the store
// published for before it kept ledgers (an upgrade) has its status's history adopted once, as the
// store adopted an earlier release's files. An object whose storage was lost with its record (an
// emptyDir in a restart) keeps its status's entries, so that status still says what was lost, but
// none of their Healthy verdicts: a forgery written into status before the loss proves nothing,
// and soaks start again from the next verdict.
func (r *KCLArtifactReconciler) provenHistory(obj *kclv1.KCLArtifact) (history []kclv1.ArtifactHistoryEntry, recorded bool, err error) {
	h, recorded, err := r.Store.History(obj)
	switch {
	case err != nil:
		return nil, false, kreconcile.Fail(kclv1.StorageFailedReason, err)
	case recorded:
		return h, true, nil
	case r.Store.HasArtifacts(obj):
		return obj.Status.History, false, nil
	}
	lost := slices.Clone(obj.Status.History)
	for i := range lost {
		if lost[i].Health != kclv1.HealthFailed {
			lost[i].Health, lost[i].HealthyAt = "", nil
		}
	}
	return lost, false, nil
}

// restoreHistory starts a reconcile from the recorded history: health, healthyAt, inputs and
// promotion records written into status by anyone else are put back, and announced. Without a
// record, what provenHistory adopts is taken silently: nothing was recorded to differ from.
func (r *KCLArtifactReconciler) restoreHistory(obj *kclv1.KCLArtifact) error {
	h, recorded, err := r.provenHistory(obj)
	if err != nil {
		return err
	}
	var changed []string
	for i, e := range obj.Status.History {
		if i >= len(h) || !sameRecord(e, h[i]) {
			changed = append(changed, e.Digest)
		}
	}
	if len(changed) == 0 && len(h) == len(obj.Status.History) {
		return nil
	}
	obj.Status.History = slices.Clone(h)
	if recorded && len(changed) > 0 {
		r.event(obj, eventWarning, kclv1.StatusRepairedReason, clean(fmt.Sprintf(
			"status.history of KCLArtifact %s/%s differed from the controller's record (entries %s): put back as recorded",
			obj.GetNamespace(), obj.GetName(), strings.Join(changed, ", "))))
	}
	return nil
}

// sameRecord compares two history entries but for what each reconcile derives again (the URL
// at the current address, whether the file is still there).
func sameRecord(a, b kclv1.ArtifactHistoryEntry) bool {
	a.URL, b.URL, a.Missing, b.Missing = "", "", false, false
	return equality.Semantic.DeepEqual(a, b)
}
