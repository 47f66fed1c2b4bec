package controller

import (
	"testing"

	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// A stage serving a rejected release with nothing to roll back to (its first artifact) keeps
// saying so at every reconcile, also while a newer release, not rejected, waits at its gates:
// Remediated=False names the rejection. Found by make demo: with the newer release rendered, the
// health step, finding the served artifact healthy, forgot what the rejections step had said,
// so that the status claimed nothing while a rejected release ran.
func TestARejectedReleaseWithNothingToRollBackToStaysVisible(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	dev := f.waitReady(f.create("dev", func(s *kclv1.KCLArtifactSpec) { s.Remediation = &kclv1.Remediation{} }))
	f.healthy(dev)
	prod := f.stage("prod", "dev", func(p *kclv1.Promotion) { p.Approval = kclv1.ApprovalRequired })
	w := f.waiting(prod, "v1", 1)
	f.approve(prod, w.Digest, "bob")
	prod = f.healthy(f.published(prod, "v1"))
	f.get(prod)
	prod.Spec.Remediation = &kclv1.Remediation{}
	f.g.Expect(k8sClient.Update(f.ctx, prod)).To(Succeed())

	f.reject(dev, dev.Status.Artifact.Digest, "alice", "checkout errors")
	prod = waitRemediated(f, prod, metav1.ConditionFalse, kclv1.NothingToRollBackToReason)
	// a newer release: dev publishes it, production renders it ahead and waits for an approval
	f.commit("v2", map[string]string{"main.k": programAt("2")})
	f.healthy(f.waitRevision(dev, "v2"))
	f.waiting(prod, "v2", 1)
	for range 3 {
		f.requestReconcile(prod)
		f.get(prod)
		f.g.Expect(prod.Status.SourceRevision).To(Equal("main@sha1:v1"))
		c := conditions.Get(prod, kclv1.RemediatedCondition)
		f.g.Expect(c).NotTo(BeNil(), "the status no longer says that a rejected release runs")
		f.g.Expect(c.Reason).To(Equal(kclv1.NothingToRollBackToReason))
		f.g.Expect(c.Message).To(ContainSubstring("rejected by alice in dev"))
	}
}

// Rolled back onto a release that is then rejected: nothing older is healthy, so it stays served,
// and the status says so instead of the rollback's "it is healthy". Found by make demo-node.
func TestARejectedRollbackTargetStaysVisible(t *testing.T) {
	f := newFixture(t)
	r := rollBackOnce(f)
	obj := r.obj
	playKustomizeController(f, "app", r.healthy.Revision)
	waitCondition(f, obj, kclv1.RemediatedCondition, metav1.ConditionTrue, kclv1.RolledBackReason)
	f.g.Eventually(func(g Gomega) {
		f.get(obj)
		g.Expect(conditions.GetMessage(obj, kclv1.RemediatedCondition)).To(HaveSuffix("it is healthy"))
	}, timeout, interval).Should(Succeed())

	f.reject(obj, r.healthy.Digest, "alice", "checkout errors")
	obj = waitRemediated(f, obj, metav1.ConditionFalse, kclv1.NothingToRollBackToReason)
	for range 3 {
		f.requestReconcile(obj)
		f.get(obj)
		f.g.Expect(obj.Status.Artifact.Digest).To(Equal(r.healthy.Digest))
		c := conditions.Get(obj, kclv1.RemediatedCondition)
		f.g.Expect(c.Reason).To(Equal(kclv1.NothingToRollBackToReason), c.Message)
		f.g.Expect(c.Message).To(ContainSubstring("rejected by alice in app"))
	}
}
