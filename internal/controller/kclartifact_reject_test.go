package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// reject sets the reject annotations of obj as an approver would (flux kcl reject); no digests
// lifts every rejection.
func (f *fixture) reject(obj *kclv1.KCLArtifact, digests, by, why string) {
	f.t.Helper()
	f.annotate(obj, map[string]string{kclv1.RejectAnnotation: digests, kclv1.RejectedByAnnotation: by, kclv1.RejectReasonAnnotation: why})
}

// A release rejected in staging: staging and dev, which run it, roll back; production, which
// has it waiting, never promotes it, approved or not; the mark outlives the quarantine (a
// reset) and a new render of the same inputs is not published; lifted, it flows again.
func TestARejectedReleaseIsNeverPromoted(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	withRemediation := func(name, upstream string) *kclv1.KCLArtifact {
		return f.create(name, func(s *kclv1.KCLArtifactSpec) {
			s.Arguments = map[string]string{"env": name}
			s.Remediation = &kclv1.Remediation{}
			if upstream != "" {
				s.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: upstream}}
			}
		})
	}
	dev := f.waitReady(withRemediation("dev", ""))
	staging := withRemediation("staging", "dev")
	prod := f.stage("prod", "staging", func(p *kclv1.Promotion) { p.Approval = kclv1.ApprovalRequired })
	f.healthy(dev)
	v1 := f.healthy(f.published(staging, "v1")).Status.Artifact.Digest
	devV1 := dev.Status.Artifact.Digest

	f.commit("v2", map[string]string{"main.k": programAt("2")})
	devV2 := f.healthy(f.waitRevision(dev, "v2")).Status.Artifact.Digest
	staging = f.healthy(f.published(staging, "v2"))
	v2 := staging.Status.Artifact.Digest
	w := f.waiting(prod, "v2", 2)
	f.g.Expect(w.Gates).NotTo(BeEmpty())

	before := rendersIn.of(f.ns)
	f.reject(staging, v2, "alice", "checkout errors")
	t.Run("the stages that run it roll back", func(t *testing.T) {
		staging = waitRemediated(f, staging, metav1.ConditionTrue, kclv1.RolledBackReason)
		f.g.Expect(staging.Status.Artifact.Digest).To(Equal(v1))
		q := staging.Status.Remediation.Quarantined
		f.g.Expect(q.Failure.Reason).To(Equal(kclv1.ReleaseRejectedReason))
		f.g.Expect(q.Failure.Message).To(ContainSubstring("rejected by alice in staging"))
		f.g.Expect(staging.Status.Rejected).To(HaveLen(1))
		f.g.Expect(staging.Status.Rejected[0].SourceRevision).To(Equal("main@sha1:v2"))
		dev = waitRemediated(f, dev, metav1.ConditionTrue, kclv1.RolledBackReason)
		f.g.Expect(dev.Status.Artifact.Digest).To(Equal(devV1), "dev runs the same release: it rolls back too")
	})

	t.Run("no stage promotes it, approved or not", func(t *testing.T) {
		waitCondition(f, prod, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.ReleaseRejectedReason)
		f.get(prod)
		w = prod.Status.Promotion.Waiting[0]
		f.g.Expect(w.SourceRevision).To(Equal("main@sha1:v2"))
		f.g.Expect(w.Gates[0].Name).To(Equal(kclv1.GateRejected))
		f.g.Expect(w.Gates[0].Message).To(ContainSubstring("rejected by alice in staging"))
		f.approve(prod, w.Digest, "bob")
		for range 3 {
			f.requestReconcile(prod)
			f.get(prod)
			f.g.Expect(prod.Status.SourceRevision).NotTo(Equal("main@sha1:v2"), "production published a rejected release")
		}
	})

	t.Run("a reset and a new render of the same inputs publish nothing", func(t *testing.T) {
		token := time.Now().Format(time.RFC3339Nano)
		f.annotate(dev, map[string]string{meta.ReconcileRequestAnnotation: token, kclv1.ResetRequestAnnotation: token})
		f.g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(dev), dev)).To(Succeed())
			g.Expect(dev.Status.LastHandledResetAt).To(Equal(token))
			g.Expect(conditions.GetReason(dev, meta.ReadyCondition)).To(Equal(kclv1.ReleaseRejectedReason))
		}, timeout, interval).Should(Succeed())
		f.g.Expect(dev.Status.Artifact.Digest).To(Equal(devV1))
		f.g.Expect(conditions.GetMessage(dev, meta.ReadyCondition)).To(ContainSubstring("main@sha1:v2 was rejected by alice in staging"))
		f.g.Expect(rendersIn.of(f.ns)-before).To(BeZero(), "the rejected inputs were rendered again")
	})

	t.Run("lifted, the release flows again", func(t *testing.T) {
		f.reject(staging, "", "", "")
		f.g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(dev), dev)).To(Succeed())
			g.Expect(dev.Status.Artifact.Digest).To(Equal(devV2))
		}, timeout, interval).Should(Succeed())
		f.healthy(dev)
		f.g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(staging), staging)).To(Succeed())
			g.Expect(staging.Status.Rejected).To(BeEmpty())
			g.Expect(staging.Status.Artifact.Digest).To(Equal(v2), "staging publishes the lifted release again")
			g.Expect(conditions.Has(staging, kclv1.RemediatedCondition)).To(BeFalse())
		}, timeout, interval).Should(Succeed())
		f.healthy(staging)
		// bob's approval of it stands: production publishes it now
		prod = f.published(prod, "v2")
		f.g.Expect(prod.Status.History[0].Promotion.ApprovedBy).To(Equal("bob"))
	})
}

// Rejecting a release, and lifting a rejection, are approvers' acts in their own name: an
// editor of the namespace can do neither.
func TestRejectingNeedsTheApproveVerb(t *testing.T) {
	f := newFixture(t)
	installAdmission(f)
	f.commit("v1", map[string]string{"main.k": program})
	dev := f.waitReady(f.stage("dev", "", nil))
	grant(f, "alice", "edit", "get", "list", "watch", "update", "patch")
	alice := as(f, "alice")
	rejectAs := func(c client.Client, digests, by string) error {
		cur := &kclv1.KCLArtifact{}
		if err := c.Get(f.ctx, client.ObjectKeyFromObject(dev), cur); err != nil {
			return err
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[kclv1.RejectAnnotation] = digests
		cur.Annotations[kclv1.RejectedByAnnotation] = by
		return c.Update(f.ctx, cur)
	}
	// the policy takes effect once the API server has loaded it: each try rejects another digest
	tries := 0
	f.g.Eventually(func() error { tries++; return rejectAs(alice, fmt.Sprintf("sha256:%d", tries), "alice") }, timeout, interval).
		Should(MatchError(ContainSubstring("alice may not reject releases of KCLArtifact " + f.ns + "/dev")))

	grant(f, "bob", "approve-bob", "get", "update", "patch", "approve")
	bob := as(f, "bob")
	f.g.Expect(rejectAs(bob, dev.Status.Artifact.Digest, "alice")).To(MatchError(ContainSubstring(
		"a rejection must name who rejects: set kcl.contrib.fluxcd.io/rejected-by to bob")))
	f.g.Expect(rejectAs(bob, dev.Status.Artifact.Digest, "bob")).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(dev), dev)).To(Succeed())
		g.Expect(dev.Status.Rejected).To(HaveLen(1))
		g.Expect(dev.Status.Rejected[0].RejectedBy).To(Equal("bob"))
	}, timeout, interval).Should(Succeed())
	err := rejectAs(alice, "", "alice")
	f.g.Expect(err).To(MatchError(ContainSubstring("alice may not reject releases")), "an editor lifted the rejection")
}
