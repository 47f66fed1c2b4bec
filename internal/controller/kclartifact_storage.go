package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/apis/meta"
	ctrl "sigs.k8s.io/controller-runtime"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
	"github.com/kcl-flux/kcl-artifact-controller/internal/reconcile/summarize"
	"github.com/kcl-flux/kcl-artifact-controller/internal/remediation"
	"github.com/kcl-flux/kcl-artifact-controller/internal/source"
	"github.com/kcl-flux/kcl-artifact-controller/internal/tarball"
)

// reconcilePin publishes the kept artifact spec.pinnedDigest names instead of a render: the
// steps that read inputs, render and promote have nothing to do.
func (r *KCLArtifactReconciler) reconcilePin(_ context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	if obj.Spec.PinnedDigest == "" {
		return nil
	}
	p.pinned = true
	published, err := r.pin(obj)
	p.published = published
	if err != nil {
		return err
	}
	return nil
}

// reconcileStorage makes a new render the current artifact, and the URLs this object's own.
// Nothing is current yet for a stage whose first artifact waits.
func (r *KCLArtifactReconciler) reconcileStorage(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	if p.rendered != nil {
		if err := r.makeCurrent(ctx, obj, p); err != nil {
			return err
		}
	}
	if obj.Status.Artifact == nil {
		return nil
	}
	// The server answers the URLs of this object (its UID) only, from now on: storage of an
	// earlier release, whose URLs had no UID, changes to this object's URLs as they are published.
	if err := r.Store.Bind(obj); err != nil {
		return kreconcile.Fail(kclv1.StorageFailedReason, err)
	}
	// The advertised address may have changed since the artifact was stored (a restart with new
	// flags): the URL always follows the current one.
	r.Store.SetArtifactURL(obj, obj.Status.Artifact)
	return nil
}

// makeCurrent makes the render's artifact the latest one, and status say what it holds.
func (r *KCLArtifactReconciler) makeCurrent(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	rd, in := p.rendered, p.in
	art := rd.art
	moved, err := r.Store.Point(*art)
	if err != nil {
		return kreconcile.Fail(kclv1.StorageFailedReason, err)
	}
	art.Metadata = map[string]string{originRevisionKey: in.source.Revision}
	if in.origin != "" {
		art.Metadata[source.OriginKey] = in.origin
	}
	// The same content publishes nothing new: the ExternalArtifact keeps its revision, so
	// kustomize-controller has nothing to apply.
	if prev := obj.Status.Artifact; prev == nil || prev.Digest != art.Digest {
		obj.Status.Artifact = art
		p.published = moved
	}
	remediation.Lift(obj)
	obj.Status.InputDigest = in.digest
	obj.Status.Exports = rd.exports
	obj.Status.SourceRevision = in.source.Revision
	obj.Status.Inventory, obj.Status.InventoryCount = manifests.InventoryOf(rd.refs), len(rd.refs)
	obj.Status.Phases = phaseStatuses(obj, rd.counts, rd.phased)
	ctrl.LoggerFrom(ctx).Info("artifact stored", "revision", art.Revision, "objects", len(rd.refs), "phases", len(obj.Status.Phases))
	return nil
}

// pin publishes the kept artifact spec.pinnedDigest names instead of rendering. Unpinning
// renders again: the input digest is cleared, since the pinned artifact is not what the inputs
// render.
func (r *KCLArtifactReconciler) pin(obj *kclv1.KCLArtifact) (published bool, err error) {
	i := slices.IndexFunc(obj.Status.History, func(e kclv1.ArtifactHistoryEntry) bool { return e.Digest == obj.Spec.PinnedDigest })
	if i < 0 {
		return false, &kreconcile.Error{Reason: kclv1.PinnedArtifactNotFoundReason, Stalled: true, Err: fmt.Errorf(
			"spec.pinnedDigest %s is not a kept artifact; kept: %s", obj.Spec.PinnedDigest, keptDigests(obj))}
	}
	obj.Status.InputDigest = ""
	published, err = r.publishKept(obj, obj.Status.History[i], false)
	if errors.Is(err, errKeptMissing) {
		return false, &kreconcile.Error{Reason: kclv1.PinnedArtifactNotFoundReason, Stalled: true, Err: fmt.Errorf(
			"the pinned artifact %s %s", obj.Status.History[i].Revision, whyNotStored(err))}
	}
	return published, err
}

// errKeptMissing is a kept artifact whose file is gone, or no longer has its digest.
var errKeptMissing = errors.New("the artifact is no longer in storage")

// whyNotStored says what became of a kept artifact the store refused: gone (the emptyDir hint),
// or damaged or replaced on disk, which no restart explains.
func whyNotStored(err error) string {
	if errors.Is(err, artifactstore.ErrDamaged) || errors.Is(err, artifactstore.ErrNotAFile) {
		return "was damaged or replaced in storage and is not served (" +
			strings.TrimPrefix(err.Error(), errKeptMissing.Error()+": ") + ")"
	}
	return "is no longer in storage" + artifactstore.MissingHint
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
		return false, kreconcile.Fail(kclv1.StorageFailedReason, err)
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
	yaml, err := r.Store.ReadYAMLFor(obj, art, limit)
	if err != nil {
		return false, kreconcile.Fail(kclv1.StorageFailedReason, fmt.Errorf("reading the kept artifact %s: %w", art.Revision, err))
	}
	objs, err := manifests.Parse(yaml, 0)
	if err != nil {
		return false, kreconcile.Fail(kclv1.InvalidOutputReason, err)
	}
	refs := make([]kclv1.ObjectReference, 0, len(objs))
	for _, o := range objs {
		refs = append(refs, manifests.Reference(o))
	}
	counts := phaseCounts(objs)
	f, err := r.Store.OpenFor(obj, art)
	if err != nil {
		return false, kreconcile.Fail(kclv1.StorageFailedReason, fmt.Errorf("reading the kept artifact %s: %w", art.Revision, err))
	}
	defer f.Close()
	apart, rollbackCounts, err := rollbackPhases(f, limit)
	if err != nil {
		return false, kreconcile.Fail(kclv1.StorageFailedReason, fmt.Errorf("reading the kept artifact %s: %w", art.Revision, err))
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
	summarize.Ready(obj, kclv1.PinnedReason, fmt.Sprintf(
		"pinned to artifact '%s' rendered from %s (spec.pinnedDigest); remove the pin to render again",
		obj.Status.Artifact.Revision, obj.Status.SourceRevision))
}
