package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/acl"
	"github.com/fluxcd/pkg/runtime/conditions"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputchange"
	"github.com/kcl-flux/kcl-artifact-controller/internal/metrics"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promotion"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
	"github.com/kcl-flux/kcl-artifact-controller/internal/reconcile/summarize"
)

// maxChain bounds the walk up a chain of stages looking for a cycle.
const maxChain = 64

// reconcileStage clears what a stage kept once spec.promotion is gone, before anything reads it
// (the inputs step's waitingFor, the history step's collection): the inputs render and publish
// as those of a plain KCLArtifact at once.
func (r *KCLArtifactReconciler) reconcileStage(_ context.Context, obj *kclv1.KCLArtifact, _ *pipeline) error {
	if obj.Spec.Promotion == nil {
		obj.Status.Promotion = nil
		conditions.Delete(obj, kclv1.PromotedCondition)
	}
	return nil
}

// reconcilePromotion makes a KCLArtifact with spec.promotion a stage: its new artifact waits in
// status.promotion.waiting, and the newest waiting one its gates let through is published. A
// failed render does not hold back what was rendered before: a broken commit upstream does not
// stop the promotion of a proven one. Without spec.promotion, what is rendered is published.
func (r *KCLArtifactReconciler) reconcilePromotion(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	if obj.Spec.Promotion == nil {
		// the render is published as it is, and its failure is the reconcile's
		return p.renderErr
	}
	if p.pinned {
		return nil
	}
	if p.rendered != nil {
		holdBack(obj, p.in, p.rendered)
		ctrl.LoggerFrom(ctx).Info("artifact stored, waiting for the promotion gates", "revision", p.rendered.art.Revision, "objects", len(p.rendered.refs))
		p.rendered = nil
	}
	if p.renderErr != nil && !hasWaiting(obj) {
		return p.renderErr
	}
	promoted, opens, err := r.promote(ctx, obj, p.rejections)
	if err != nil {
		return err
	}
	p.promoted, p.promoteAt, p.published = promoted, opens, promoted != nil
	return nil
}

// holdBack keeps a stage's new artifact waiting instead of publishing it: stored, listed first in
// status.promotion.waiting with its inputs (the history step keeps historyLimit of them). Output
// equal to what is served waits for nothing.
func holdBack(obj *kclv1.KCLArtifact, in *inputs, rd *rendered) {
	art := rd.art
	if cur := obj.Status.Artifact; cur != nil && cur.Digest == art.Digest {
		obj.Status.InputDigest = in.digest
		return
	}
	ps := promotionStatus(obj)
	kept := []kclv1.WaitingArtifact{{Digest: art.Digest, Revision: art.Revision, SourceRevision: in.source.Revision,
		URL: art.URL, Size: art.Size, Objects: len(rd.refs), InputDigest: in.digest, RenderedAt: metav1.Now(), Inputs: in.record}}
	for _, w := range ps.Waiting {
		if w.InputDigest != in.digest {
			kept = append(kept, w)
		}
	}
	ps.Waiting = kept
}

func promotionStatus(obj *kclv1.KCLArtifact) *kclv1.PromotionStatus {
	if obj.Status.Promotion == nil {
		obj.Status.Promotion = &kclv1.PromotionStatus{}
	}
	obj.Status.Promotion.Upstream = upstreamName(obj)
	return obj.Status.Promotion
}

func hasWaiting(obj *kclv1.KCLArtifact) bool {
	return obj.Status.Promotion != nil && len(obj.Status.Promotion.Waiting) > 0
}

// waitingFor tells whether inputs of this digest already wait: they are not rendered again.
func (r *KCLArtifactReconciler) waitingFor(obj *kclv1.KCLArtifact, digest string) bool {
	if obj.Status.Promotion == nil {
		return false
	}
	for _, w := range obj.Status.Promotion.Waiting {
		if w.InputDigest == digest && r.Store.Keeps(obj, entryOf(w)) {
			return true
		}
	}
	return false
}

// promote passes the waiting artifacts through the gates and publishes the newest one they let
// through; the older ones leave the list, the newer ones keep waiting. retry is when a closed
// gate opens by itself.
func (r *KCLArtifactReconciler) promote(ctx context.Context, obj *kclv1.KCLArtifact, rejections []promotion.Rejection) (p *promoted, retry time.Time, err error) {
	ps := promotionStatus(obj)
	windows, err := promotion.ParseWindows(obj.Spec.Promotion.Windows)
	if err != nil {
		return nil, time.Time{}, &kreconcile.Error{Reason: kclv1.InvalidWindowReason, Stalled: true, Err: err}
	}
	up, err := r.upstreamOf(ctx, obj)
	if err != nil {
		return nil, time.Time{}, err
	}
	line, err := r.lineStop(ctx, obj.GetNamespace())
	if err != nil {
		return nil, time.Time{}, err
	}
	a := obj.GetAnnotations()
	stage := promotion.Stage{Spec: *obj.Spec.Promotion, Windows: windows, Upstream: up, UpstreamName: upstreamName(obj), Now: time.Now(),
		Approved: a[kclv1.ApproveAnnotation], ApprovedBy: a[kclv1.ApprovedByAnnotation], Exemption: clean(a[kclv1.ExemptionAnnotation]), Line: line,
		Rejections: rejections, UpstreamVerifies: up != nil && up.Spec.Verify != nil}
	r.checkApproval(obj, stage.Approved)
	chosen, verdicts := -1, make([]promotion.Verdict, len(ps.Waiting))
	for i := range ps.Waiting {
		w := &ps.Waiting[i]
		v := stage.Evaluate(*w)
		verdicts[i] = v
		w.Gates = promotion.Carry(w.Gates, v.Gates, stage.Now)
		recordApproval(obj, w, stage)
		if !v.Retry.IsZero() && (retry.IsZero() || v.Retry.Before(retry)) {
			retry = v.Retry
		}
		if v.Open && chosen < 0 {
			chosen = i
		}
	}
	if chosen >= 0 {
		if p, err = r.publishWaiting(obj, chosen, verdicts[chosen]); err != nil {
			return nil, time.Time{}, err
		}
	}
	markPromotion(obj, verdicts, line)
	return p, retry, nil
}

// recordApproval records who approved a waiting artifact (for the approval gate, or to pass a
// stopped line), from the approval annotations the admission policy let through, never from
// what status says: a tenant who writes status names no approver. An approval that names
// another artifact records none.
func recordApproval(obj *kclv1.KCLArtifact, w *kclv1.WaitingArtifact, stage promotion.Stage) {
	if (obj.Spec.Promotion.Approval != kclv1.ApprovalRequired && !stage.Exempted(*w)) || stage.Approved != w.Digest {
		w.ApprovedBy, w.ApprovedAt = "", nil
		return
	}
	if by := promotion.ApproverName(stage.ApprovedBy); w.ApprovedBy != by || w.ApprovedAt == nil {
		w.ApprovedBy, w.ApprovedAt = by, &metav1.Time{Time: stage.Now.Truncate(time.Second)}
	}
}

// publishWaiting publishes the waiting artifact i, as a pin publishes a kept one.
func (r *KCLArtifactReconciler) publishWaiting(obj *kclv1.KCLArtifact, i int, v promotion.Verdict) (*promoted, error) {
	ps := obj.Status.Promotion
	w := ps.Waiting[i]
	if _, err := r.publishKept(obj, entryOf(w), false); err != nil {
		if errors.Is(err, errKeptMissing) {
			// gone from storage (an emptyDir lost in a restart): its inputs are rendered again
			ps.Waiting = slices.Delete(ps.Waiting, i, i+1)
			return nil, kreconcile.Fail(kclv1.StorageFailedReason, fmt.Errorf("the waiting artifact %s %s; rendering its inputs again", w.Revision, whyNotStored(err)))
		}
		return nil, err
	}
	obj.Status.InputDigest = w.InputDigest
	ps.Waiting = ps.Waiting[:i]
	rec := kclv1.PromotionRecord{Upstream: upstreamName(obj), RenderedAt: &w.RenderedAt,
		ApprovedBy: w.ApprovedBy, ApprovedAt: w.ApprovedAt, Exemption: v.Exemption}
	if v.Proof != nil {
		rec.UpstreamRevision, rec.HealthySince = v.Proof.Revision, v.Proof.HealthyAt
	}
	for _, g := range w.Gates {
		if g.Since != nil {
			metrics.GateWait.WithLabelValues(obj.GetNamespace(), g.Name).Observe(max(g.Since.Sub(w.RenderedAt.Time), 0).Seconds())
		}
	}
	return &promoted{waiting: w, record: rec}, nil
}

// upstreamOf reads the upstream from the cache, with the history the controller recorded for it
// in place of its status's (provenHistory): a tenant who writes the upstream's status forges no
// health, no healthyAt and no inputs. nil when it does not exist. An upstream in another
// namespace is read only with its consent (FollowersAnnotation); a chain that comes back to the
// stage stalls it.
func (r *KCLArtifactReconciler) upstreamOf(ctx context.Context, obj *kclv1.KCLArtifact) (*kclv1.KCLArtifact, error) {
	key := upstreamKey(obj)
	up := &kclv1.KCLArtifact{}
	err := r.Get(ctx, key, up)
	if key.Namespace != obj.GetNamespace() && (apierrors.IsNotFound(err) || (err == nil && !followsAllowed(up, obj.GetNamespace()))) {
		// one message whether it exists or not: a stage learns nothing of another namespace
		return nil, &kreconcile.Error{Reason: acl.AccessDeniedReason, Err: fmt.Errorf(
			"spec.promotion.from: KCLArtifact %s does not exist or does not allow stages of namespace %s to follow it: "+
				"its owner adds the annotation %s: %s to it", key, obj.GetNamespace(), kclv1.FollowersAnnotation, obj.GetNamespace())}
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := r.checkChain(ctx, obj, up); err != nil {
		return nil, err
	}
	if up.Status.History, _, err = r.provenHistory(up); err != nil {
		return nil, err
	}
	return up, nil
}

// upstreamKey is the upstream a stage names, in the stage's namespace unless it names another.
func upstreamKey(obj *kclv1.KCLArtifact) types.NamespacedName {
	from := obj.Spec.Promotion.From
	return types.NamespacedName{Namespace: cmp.Or(from.Namespace, obj.GetNamespace()), Name: from.Name}
}

// upstreamName is how status, events and history name a stage's upstream: its name, with its
// namespace when that is not the stage's.
func upstreamName(obj *kclv1.KCLArtifact) string {
	key := upstreamKey(obj)
	if key.Namespace != obj.GetNamespace() {
		return key.String()
	}
	return key.Name
}

// followsAllowed tells whether up consents to stages of namespace ns following it.
func followsAllowed(up *kclv1.KCLArtifact, ns string) bool {
	for _, n := range strings.Split(up.GetAnnotations()[kclv1.FollowersAnnotation], ",") {
		if n = strings.TrimSpace(n); n == "*" || n == ns {
			return true
		}
	}
	return false
}

// checkChain walks up the chain of stages from up: one that comes back to obj stalls it.
func (r *KCLArtifactReconciler) checkChain(ctx context.Context, obj, up *kclv1.KCLArtifact) error {
	// named as the stage names them: by name within its namespace
	nameOf := func(o client.Object) string {
		if o.GetNamespace() == obj.GetNamespace() {
			return o.GetName()
		}
		return client.ObjectKeyFromObject(o).String()
	}
	chain := []string{nameOf(obj)}
	for cur := up; cur != nil && len(chain) <= maxChain; {
		here := nameOf(cur)
		if slices.Contains(chain, here) {
			return &kreconcile.Error{Reason: kclv1.PromotionCycleReason, Stalled: true, Err: fmt.Errorf(
				"the stages follow each other in a cycle: %s → %s", strings.Join(chain, " → "), here)}
		}
		chain = append(chain, here)
		if cur.Spec.Promotion == nil {
			return nil
		}
		next := &kclv1.KCLArtifact{}
		err := r.Get(ctx, upstreamKey(cur), next)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		cur = next
	}
	return nil
}

// checkApproval reports once an approval that names no waiting artifact: a typo, or one already
// published or dropped.
func (r *KCLArtifactReconciler) checkApproval(obj *kclv1.KCLArtifact, approved string) {
	ps := obj.Status.Promotion
	if approved == "" || slices.ContainsFunc(ps.Waiting, func(w kclv1.WaitingArtifact) bool { return w.Digest == approved }) ||
		slices.ContainsFunc(obj.Status.History, func(e kclv1.ArtifactHistoryEntry) bool { return e.Digest == approved }) {
		ps.RejectedApproval = ""
		return
	}
	if ps.RejectedApproval == approved {
		return
	}
	ps.RejectedApproval = approved
	var waiting []string
	for _, w := range ps.Waiting {
		waiting = append(waiting, w.Digest)
	}
	if len(waiting) == 0 {
		waiting = []string{"none"}
	}
	r.event(obj, eventWarning, kclv1.ApprovalRejectedReason, fmt.Sprintf(
		"the approval of %s names no waiting artifact (waiting: %s): nothing was approved", approved, strings.Join(waiting, ", ")))
}

// markPromotion sets the Promoted condition: True when nothing waits (or the newest waiting one
// was published), else the newest waiting artifact's first closed gate. A stopped line is said
// either way.
func markPromotion(obj *kclv1.KCLArtifact, verdicts []promotion.Verdict, line *promotion.Stop) {
	ps := obj.Status.Promotion
	if len(ps.Waiting) == 0 {
		msg := fmt.Sprintf("serves the newest artifact its gates let through (upstream %s)", upstreamName(obj))
		if h := obj.Status.History; len(h) > 0 && h[0].Promotion != nil {
			msg = fmt.Sprintf("serves %s, run healthy by %s as %s", h[0].Revision, h[0].Promotion.Upstream, h[0].Promotion.UpstreamRevision)
		}
		if line != nil {
			msg += "; " + line.String()
		}
		conditions.MarkTrue(obj, kclv1.PromotedCondition, kclv1.PromotedReason, "%s", msg)
		return
	}
	v := verdicts[0]
	w := ps.Waiting[0]
	since := w.RenderedAt
	for _, g := range w.Gates {
		if !g.Open && g.Since != nil {
			since = *g.Since
			break
		}
	}
	conditions.MarkFalse(obj, kclv1.PromotedCondition, v.Reason, "%s waits since %s: %s", w.Revision, since.UTC().Format(time.RFC3339), v.Message)
}

// promotionMessage is the event of a promotion: what the stage now runs, and what proved it.
func promotionMessage(obj *kclv1.KCLArtifact, p *promoted, secretValues []string) string {
	runs := p.waiting.SourceRevision
	if h := obj.Status.History; len(h) > 1 {
		changes := inputchange.Changes(h[1].Inputs, p.waiting.Inputs)
		for i := range changes {
			changes[i] = changes[i].Mask(secretValues)
		}
		if len(changes) > 0 {
			runs = inputchange.Text(changes, 5) + " (" + p.waiting.SourceRevision + ")"
		}
	}
	msg := fmt.Sprintf("%s now runs %s", obj.GetName(), runs)
	if p.record.HealthySince != nil {
		msg += fmt.Sprintf(", healthy in %s for %s", p.record.Upstream, time.Since(p.record.HealthySince.Time).Round(time.Second))
	}
	if p.record.ApprovedBy != "" {
		msg += ", approved by " + p.record.ApprovedBy
	}
	return msg
}

// markWaitingFirst reports a stage that has published nothing yet: Ready waits on the gate.
func markWaitingFirst(obj *kclv1.KCLArtifact) {
	c := conditions.Get(obj, kclv1.PromotedCondition)
	if c == nil || c.Status == metav1.ConditionTrue {
		summarize.NotReady(obj, kclv1.UpstreamNotHealthyReason, "nothing published yet")
		return
	}
	summarize.NotReady(obj, c.Reason, "nothing published yet: "+c.Message)
}
