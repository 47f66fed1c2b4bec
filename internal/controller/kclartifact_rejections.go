package controller

import (
	"context"
	"slices"
	"strings"

	"github.com/fluxcd/pkg/runtime/conditions"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promotion"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
	"github.com/kcl-flux/kcl-artifact-controller/internal/remediation"
)

const (
	// maxRejections bounds the digests one reject annotation names.
	maxRejections = 64
	// maxPipeline bounds the KCLArtifacts of a pipeline whose rejections a reconcile reads.
	maxPipeline = 256
)

// reconcileRejections gathers the rejections of this KCLArtifact's whole pipeline (its own reject
// annotation resolved before the steps, into status.rejected) for the steps after it (the inputs
// step publishes no rejected release, the promotion step promotes none, a rollback goes to none),
// and rolls back a served artifact of a rejected release at once: before the inputs, which render
// the same rejected release while the source has not moved on, stop the reconcile.
func (r *KCLArtifactReconciler) reconcileRejections(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	rs, err := r.pipelineRejections(ctx, obj)
	if err != nil {
		return err
	}
	p.rejections = rs
	if e := servedEntry(obj); e != nil {
		if rj := rejectionOf(rs, *e); rj != nil {
			// the inputs are not read yet: no Secret value to mask is known, and the rollback's
			// event names no changed object of a KCLArtifact that reads Secrets (changeOf)
			return r.rejectServed(ctx, obj, rj, rs, nil)
		}
	}
	if c := conditions.Get(obj, kclv1.RemediatedCondition); c != nil && c.Reason == kclv1.ReleaseRejectedReason {
		conditions.Delete(obj, kclv1.RemediatedCondition) // what is served is no longer rejected
	}
	liftQuarantine(obj, rs)
	return nil
}

// resolveSuspended resolves the reject annotation of a suspended KCLArtifact, and records it, so
// that the other stages of its pipeline act on the rejection at once; nothing else of the
// suspended object is reconciled (no rollback, no render) until it is resumed. It resolves
// against the recorded history, as a reconcile does.
func (r *KCLArtifactReconciler) resolveSuspended(obj *kclv1.KCLArtifact) error {
	if err := r.restoreRejections(obj); err != nil {
		return err
	}
	history, _, err := r.provenHistory(obj)
	if err != nil {
		return err
	}
	view := obj.DeepCopy()
	view.Status.History = history
	rejected := resolveRejections(view, metav1.Now())
	if equality.Semantic.DeepEqual(rejected, obj.Status.Rejected) {
		return nil
	}
	// the ledger first: status is its copy, and the other stages read the ledger
	if err := r.Store.RecordHistory(obj, history, rejected); err != nil {
		return kreconcile.Fail(kclv1.StorageFailedReason, err)
	}
	obj.Status.Rejected = rejected
	return nil
}

// liftQuarantine ends the quarantine of an artifact rolled back from for its rejection once the
// rejection is lifted: its inputs are rendered and published again, as after a reset.
func liftQuarantine(obj *kclv1.KCLArtifact, rs []promotion.Rejection) {
	q := remediation.RolledBack(obj)
	if q == nil || q.Failure.Reason != kclv1.ReleaseRejectedReason {
		return
	}
	for _, e := range obj.Status.History {
		if e.Digest == q.Digest && rejectionOf(rs, e) != nil {
			return
		}
	}
	remediation.Clear(obj)
	obj.Status.InputDigest = ""
}

// rejectServed acts on a served artifact whose release was rejected: rolled back at once (no
// retries: nothing about it will change) where spec.remediation is set; otherwise Remediated
// says what is served. A pin is a person's choice and stays.
func (r *KCLArtifactReconciler) rejectServed(ctx context.Context, obj *kclv1.KCLArtifact, rj *promotion.Rejection, rs []promotion.Rejection, sensitive []string) error {
	switch {
	case obj.Spec.Remediation == nil || obj.Spec.PinnedDigest != "":
		r.markRemediated(obj, metav1.ConditionFalse, kclv1.ReleaseRejectedReason,
			"serves %s, a rejected release (%s); without spec.remediation, or pinned, it is not rolled back", obj.Status.Artifact.Revision, rj)
		return nil
	case !obj.KustomizationEnabled():
		r.markRemediated(obj, metav1.ConditionFalse, kclv1.RemediationUnavailableReason,
			"serves %s, a rejected release (%s); spec.remediation needs the generated Kustomization, and kustomization.disabled is set", obj.Status.Artifact.Revision, rj)
		return nil
	}
	failure := &kclv1.ArtifactFailure{Reason: kclv1.ReleaseRejectedReason, Message: clean(rj.String()), At: metav1.Now()}
	return r.rollBack(ctx, obj, failure, rs, sensitive)
}

// resolveRejections is status.rejected as the reject annotation says it now, from the recorded
// rejections (restoreRejections put them in status.rejected): a digest seen before keeps its
// record (who, why and when it was first seen), a new one is resolved to the inputs of the
// artifact it names in the history or among the waiting ones, and a digest no longer named is
// lifted.
func resolveRejections(obj *kclv1.KCLArtifact, now metav1.Time) []kclv1.RejectedRelease {
	a := obj.GetAnnotations()
	var out []kclv1.RejectedRelease
	for _, d := range strings.Split(a[kclv1.RejectAnnotation], ",") {
		if d = strings.TrimSpace(d); d == "" || slices.ContainsFunc(out, func(r kclv1.RejectedRelease) bool { return r.Digest == d }) {
			continue
		}
		if len(out) == maxRejections {
			break
		}
		i := slices.IndexFunc(obj.Status.Rejected, func(r kclv1.RejectedRelease) bool { return r.Digest == d })
		if i >= 0 && obj.Status.Rejected[i].SourceRevision != "" {
			out = append(out, obj.Status.Rejected[i])
			continue
		}
		rec := kclv1.RejectedRelease{Digest: d, RejectedBy: clean(a[kclv1.RejectedByAnnotation]), Reason: clean(a[kclv1.RejectReasonAnnotation]), RejectedAt: now}
		if i >= 0 {
			rec.RejectedAt = obj.Status.Rejected[i].RejectedAt
		}
		if src, inputs, ok := releaseOf(obj, d); ok {
			rec.SourceRevision, rec.Inputs = src, inputs
		} else {
			rec.Message = "names no artifact of this KCLArtifact (its history or its waiting artifacts): nothing is rejected"
		}
		out = append(out, rec)
	}
	return out
}

// releaseOf is what the artifact of digest was rendered from: its source revision and inputs.
func releaseOf(obj *kclv1.KCLArtifact, digest string) (string, []kclv1.InputValue, bool) {
	for _, e := range obj.Status.History {
		if e.Digest == digest && e.SourceRevision != "" {
			return e.SourceRevision, e.Inputs, true
		}
	}
	if ps := obj.Status.Promotion; ps != nil {
		for _, w := range ps.Waiting {
			if w.Digest == digest && w.SourceRevision != "" {
				return w.SourceRevision, w.Inputs, true
			}
		}
	}
	return "", nil, false
}

// pipelineRejections are the rejections of every KCLArtifact of obj's pipeline (pipelineOf): obj's
// as just resolved, the others' as the controller recorded them in the store (their ledgers),
// never as their status says: status is a copy whoever may write the subresource can rewrite.
func (r *KCLArtifactReconciler) pipelineRejections(ctx context.Context, obj *kclv1.KCLArtifact) ([]promotion.Rejection, error) {
	members, err := r.pipelineOf(ctx, obj)
	var out []promotion.Rejection
	for i, m := range members {
		origin := m.GetName()
		if m.GetNamespace() != obj.GetNamespace() {
			origin = client.ObjectKeyFromObject(m).String()
		}
		recs := obj.Status.Rejected
		if i > 0 {
			rec, recorded, rerr := r.Store.Rejections(m)
			if rerr != nil {
				return out, kreconcile.Fail(kclv1.StorageFailedReason, rerr)
			}
			// a member with no ledger (its storage lost) holds what its status says, as it will
			// adopt at its own next reconcile (restoreRejections)
			recs = m.Status.Rejected
			if recorded {
				recs = rec
			}
		}
		for _, rec := range recs {
			out = append(out, promotion.Rejection{RejectedRelease: rec, Origin: origin})
		}
	}
	return out, err
}

// pipelineOf is obj and the KCLArtifacts linked to it by spec.promotion.from, either way, up to
// maxPipeline of them: a rejection anywhere in a pipeline holds everywhere in it. Going up, it
// crosses into another namespace only where the upstream consents to followers of that
// namespace (as a stage reads it); going down, it stays in the namespace it is in, so that a
// follower in another namespace never rejects for the namespace it follows.
func (r *KCLArtifactReconciler) pipelineOf(ctx context.Context, obj *kclv1.KCLArtifact) ([]*kclv1.KCLArtifact, error) {
	seen := map[types.NamespacedName]bool{client.ObjectKeyFromObject(obj): true}
	members := []*kclv1.KCLArtifact{obj}
	for i := 0; i < len(members) && len(members) < maxPipeline; i++ {
		next, err := r.linked(ctx, members[i])
		if err != nil {
			return members, err
		}
		for _, n := range next {
			if k := client.ObjectKeyFromObject(n); !seen[k] && len(members) < maxPipeline {
				seen[k] = true
				members = append(members, n)
			}
		}
	}
	return members, nil
}

// linked are m's upstream (with its consent when in another namespace) and the stages of m's
// namespace that follow it, from the cache.
func (r *KCLArtifactReconciler) linked(ctx context.Context, m *kclv1.KCLArtifact) ([]*kclv1.KCLArtifact, error) {
	var out []*kclv1.KCLArtifact
	if m.Spec.Promotion != nil {
		key := upstreamKey(m)
		up := &kclv1.KCLArtifact{}
		err := r.Get(ctx, key, up)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, err
		case key.Namespace == m.GetNamespace() || followsAllowed(up, m.GetNamespace()):
			out = append(out, up)
		}
	}
	var list kclv1.KCLArtifactList
	if err := r.List(ctx, &list, client.InNamespace(m.GetNamespace()),
		client.MatchingFields{upstreamIndex: client.ObjectKeyFromObject(m).String()}); err != nil {
		return nil, err
	}
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

// pipelineRequests wakes every KCLArtifact of o's pipeline, and the stages of other namespaces
// following one of them: a rejection in it changed.
func (r *KCLArtifactReconciler) pipelineRequests(ctx context.Context, o client.Object) []reconcile.Request {
	obj, ok := o.(*kclv1.KCLArtifact)
	if !ok {
		return nil
	}
	members, _ := r.pipelineOf(ctx, obj)
	reqs := make([]reconcile.Request, 0, len(members))
	for _, m := range members[1:] {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(m)})
	}
	// and the stages of other namespaces that follow a member: they read its rejections going
	// up, which pipelineOf does not walk down to
	for _, m := range members {
		for _, req := range r.stagesOf(ctx, m) {
			if req.Namespace != obj.GetNamespace() {
				reqs = append(reqs, req)
			}
		}
	}
	return reqs
}

// rejectionOf is the rejection covering the artifact of history entry e; nil when none does.
func rejectionOf(rs []promotion.Rejection, e kclv1.ArtifactHistoryEntry) *promotion.Rejection {
	return promotion.Rejected(rs, e.SourceRevision, e.Inputs)
}
