package controller

import (
	"os"
	"path/filepath"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
)

// grantStatus lets user read KCLArtifacts and write their status subresource, as a namespace's
// admin bound to cluster-admin (flux2-multi-tenancy) may; Flux's edit grants only get on it.
func grantStatus(f *fixture, user string) {
	f.t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "status-writer", Namespace: f.ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{kclv1.GroupVersion.Group}, Resources: []string{"kclartifacts"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{kclv1.GroupVersion.Group}, Resources: []string{"kclartifacts/status"}, Verbs: []string{"get", "update", "patch"}},
	}}
	f.g.Expect(k8sClient.Create(f.ctx, role)).To(Succeed())
	f.g.Expect(k8sClient.Create(f.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "status-writer", Namespace: f.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})).To(Succeed())
}

// status.rejected is a copy of the controller's record (the store's ledger): whoever may write a
// KCLArtifact's status cannot un-reject a release by emptying it (as a restore of a backup taken
// before the rejection does, or a status lost with a restart), nor by rewriting a record to
// another release. The rejected release, approved, is still never published, and the record is
// put back.
func TestARejectionIsTheControllersRecord(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	// without spec.remediation dev keeps serving the rejected release healthy: only the rejection
	// holds production
	dev := f.waitReady(f.stage("dev", "", nil))
	prod := f.stage("prod", "dev", func(p *kclv1.Promotion) { p.Approval = kclv1.ApprovalRequired })
	f.healthy(dev)
	f.waiting(prod, "v1", 1)
	f.commit("v2", map[string]string{"main.k": programAt("2")})
	f.healthy(f.waitRevision(dev, "v2"))
	w := f.waiting(prod, "v2", 2)

	// a waiting artifact's digest: only the rejection's record says which release it names
	f.reject(prod, w.Digest, "alice", "checkout errors")
	waitCondition(f, prod, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.ReleaseRejectedReason)
	f.approve(prod, w.Digest, "bob")
	grantStatus(f, "mallory")
	mallory := as(f, "mallory")

	stillRejected := func(what string) {
		t.Helper()
		for range 3 {
			f.requestReconcile(prod)
			f.get(prod)
			f.g.Expect(prod.Status.SourceRevision).NotTo(Equal("main@sha1:v2"), what+": production published a rejected release")
		}
		f.g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(prod), prod)).To(Succeed())
			g.Expect(prod.Status.Rejected).To(HaveLen(1))
			g.Expect(prod.Status.Rejected[0].SourceRevision).To(Equal("main@sha1:v2"), what+": the record is put back")
			g.Expect(prod.Status.Rejected[0].RejectedBy).To(Equal("alice"))
		}, timeout, interval).Should(Succeed())
	}

	t.Run("an emptied status", func(t *testing.T) {
		f.g.Expect(mallory.Status().Patch(f.ctx, prod, client.RawPatch(types.MergePatchType,
			[]byte(`{"status":{"rejected":null,"promotion":null,"history":null}}`)))).To(Succeed())
		stillRejected("status emptied")
	})

	t.Run("a record rewritten to another release", func(t *testing.T) {
		f.g.Eventually(func() error {
			cur := &kclv1.KCLArtifact{}
			if err := mallory.Get(f.ctx, client.ObjectKeyFromObject(prod), cur); err != nil {
				return err
			}
			if len(cur.Status.Rejected) == 0 {
				cur.Status.Rejected = []kclv1.RejectedRelease{{Digest: w.Digest, RejectedAt: metav1.Now()}}
			}
			cur.Status.Rejected[0].SourceRevision = "main@sha1:forged"
			return mallory.Status().Update(f.ctx, cur)
		}, timeout, interval).Should(Succeed())
		stillRejected("status.rejected forged")
	})
}

// releaseToReject is dev (remediation on) running v2 healthy after v1, and prod (approval
// required) holding v2 back: the release a test rejects, with devV1 what dev rolls back to.
func releaseToReject(f *fixture) (dev, prod *kclv1.KCLArtifact, devV1 string, w kclv1.WaitingArtifact) {
	f.t.Helper()
	f.commit("v1", map[string]string{"main.k": program})
	dev = f.waitReady(f.create("dev", func(s *kclv1.KCLArtifactSpec) {
		s.Arguments = map[string]string{"env": "dev"}
		s.Remediation = &kclv1.Remediation{}
	}))
	prod = f.stage("prod", "dev", func(p *kclv1.Promotion) { p.Approval = kclv1.ApprovalRequired })
	devV1 = f.healthy(dev).Status.Artifact.Digest
	f.waiting(prod, "v1", 1)
	f.commit("v2", map[string]string{"main.k": programAt("2")})
	f.healthy(f.waitRevision(dev, "v2"))
	return dev, prod, devV1, f.waiting(prod, "v2", 2)
}

// A rejection holds for the whole pipeline even while the KCLArtifact it is put on is suspended:
// the controller resolves and records it (status.rejected) at once, and the other stages act on it
// (dev, which runs the release, rolls back); the suspended stage itself does nothing more until it
// is resumed, and then holds the release behind the gate rejected.
func TestARejectionOnASuspendedStageHoldsThePipeline(t *testing.T) {
	f := newFixture(t)
	dev, prod, devV1, w := releaseToReject(f)

	f.update(prod, func(s *kclv1.KCLArtifactSpec) { s.Suspend = true })
	f.reject(prod, w.Digest, "alice", "checkout errors")
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(prod), prod)).To(Succeed())
		g.Expect(prod.Spec.Suspend).To(BeTrue())
		g.Expect(prod.Status.Rejected).To(HaveLen(1), "the rejection on the suspended stage is resolved")
		g.Expect(prod.Status.Rejected[0].SourceRevision).To(Equal("main@sha1:v2"))
	}, timeout, interval).Should(Succeed())
	dev = waitRemediated(f, dev, metav1.ConditionTrue, kclv1.RolledBackReason)
	f.g.Expect(dev.Status.Artifact.Digest).To(Equal(devV1), "dev runs the rejected release: it rolls back")

	f.update(prod, func(s *kclv1.KCLArtifactSpec) { s.Suspend = false })
	f.approve(prod, w.Digest, "bob")
	waitCondition(f, prod, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.ReleaseRejectedReason)
	f.requestReconcile(prod)
	f.get(prod)
	f.g.Expect(prod.Status.SourceRevision).NotTo(Equal("main@sha1:v2"), "production published a rejected release")
}

// The store's ledgers lost (an emptyDir in a new Pod): a rejection put on production, which dev
// had rolled back from, still holds. dev, reconciling before production records it again, reads
// it from production's status instead of lifting its quarantine and publishing the release again;
// production keeps its record and keeps the release out.
func TestARejectionOutlivesTheLedger(t *testing.T) {
	f := newFixture(t)
	dev, prod, devV1, w := releaseToReject(f)
	f.reject(prod, w.Digest, "alice", "checkout errors")
	dev = waitRemediated(f, dev, metav1.ConditionTrue, kclv1.RolledBackReason)
	f.g.Expect(dev.Status.Artifact.Digest).To(Equal(devV1))
	f.approve(prod, w.Digest, "bob")

	for _, obj := range []*kclv1.KCLArtifact{dev, prod} {
		ledger := filepath.Join(testStorage.LocalPath(meta.Artifact{Path: artifactstore.Dir(obj)}), ".history.json")
		f.g.Expect(os.Remove(ledger)).To(Succeed())
	}
	for range 3 {
		f.requestReconcile(dev)
		f.get(dev)
		f.g.Expect(dev.Status.Artifact.Digest).To(Equal(devV1), "dev published the rejected release again")
		f.requestReconcile(prod)
		f.get(prod)
		f.g.Expect(prod.Status.SourceRevision).NotTo(Equal("main@sha1:v2"), "production published a rejected release")
		f.g.Expect(prod.Status.Rejected).To(HaveLen(1))
		f.g.Expect(prod.Status.Rejected[0].SourceRevision).To(Equal("main@sha1:v2"))
	}
}

// A rejection is resolved even when the KCLArtifact it is put on cannot reconcile: an editor who
// breaks production's spec (a name no object can have, which stops the reconcile at its first
// step) does not keep the rest of the pipeline from acting on it. dev, running the release,
// rolls back.
func TestARejectionOnABrokenStageHoldsThePipeline(t *testing.T) {
	f := newFixture(t)
	dev, prod, devV1, w := releaseToReject(f)

	f.update(prod, func(s *kclv1.KCLArtifactSpec) {
		s.Kustomization = &kclv1.KustomizationTemplate{DependsOn: []kustomizev1.DependencyReference{{Name: "infra", Namespace: "flux/system"}}}
	})
	f.waitFor(prod, metav1.ConditionFalse, kclv1.InvalidReferenceReason)
	f.reject(prod, w.Digest, "alice", "checkout errors")
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(prod), prod)).To(Succeed())
		g.Expect(prod.Status.Rejected).To(HaveLen(1), "the rejection on the broken stage is resolved")
		g.Expect(prod.Status.Rejected[0].SourceRevision).To(Equal("main@sha1:v2"))
	}, timeout, interval).Should(Succeed())
	dev = waitRemediated(f, dev, metav1.ConditionTrue, kclv1.RolledBackReason)
	f.g.Expect(dev.Status.Artifact.Digest).To(Equal(devV1))
}
