package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/acl"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// The attacks of issue 53 on what a stage's gates read. A namespace admin writes the status
// subresource of the KCLArtifacts of its namespace (the suite's client is a cluster admin: what it
// writes to status here, a namespace admin may write). The gates read the history the controller
// recorded in its store, never the upstream's status.

// forgeHistory writes the upstream's status as an admin of its namespace would: its newest
// history entry healthy since two hours. The forged status is not acted on when it is written
// (a status write queues no reconcile): the stages that read it are reconciled at once (a watch),
// and the upstream puts it back at its next reconcile, which the test requests.
func forgeHistory(f *fixture, obj *kclv1.KCLArtifact) {
	f.t.Helper()
	f.g.Eventually(func() error {
		if err := k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		long := metav1.NewTime(time.Now().Add(-2 * time.Hour).Truncate(time.Second))
		obj.Status.History[0].Health, obj.Status.History[0].HealthyAt, obj.Status.History[0].Failure = kclv1.HealthHealthy, &long, nil
		return k8sClient.Status().Update(f.ctx, obj)
	}, timeout, interval).Should(Succeed())
}

func repairedEvent(f *fixture, obj *kclv1.KCLArtifact, digest string) {
	f.t.Helper()
	f.g.Eventually(func() []string { return messages(eventsReceiver.of(obj)) }, timeout, interval).Should(ContainElement(
		And(ContainSubstring("status.history of KCLArtifact "+obj.Namespace+"/"+obj.Name+" differed from the controller's record"),
			ContainSubstring(digest))))
}

// soakingStage is dev, published, and prod following it with soak: 1h, its artifact of v1 waiting.
func soakingStage(t *testing.T) (f *fixture, dev, prod *kclv1.KCLArtifact) {
	f = newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	dev = f.waitReady(f.stage("dev", "", nil))
	prod = f.stage("prod", "dev", func(p *kclv1.Promotion) { p.Soak = &metav1.Duration{Duration: time.Hour} })
	f.waiting(prod, "v1", 1)
	f.get(dev)
	return f, dev, prod
}

// A failed release forged healthy in the upstream's status, two hours back, promotes nothing and
// shortens no soak: the stage still says what the upstream really ran, and the upstream's status
// is put back.
func TestForgedUpstreamHealthPromotesNothing(t *testing.T) {
	f, dev, prod := soakingStage(t)

	// dev's release fails in its Kustomization
	digest := dev.Status.Artifact.Digest
	playKustomizeFailure(f, "dev", dev.Status.Artifact.Revision, "HealthCheckFailed", "Deployment/app: not ready")
	waitHealth(f, dev, digest, kclv1.HealthFailed)

	forgeHistory(f, dev)
	f.requestReconcile(prod) // woken by the forged status, as by any change of dev's history
	f.g.Expect(prod.Status.Artifact).To(BeNil(), "a forged health published the release")
	f.requestReconcile(dev)
	repairedEvent(f, dev, digest)
	waitHealth(f, dev, digest, kclv1.HealthFailed)
	f.requestReconcile(prod)
	f.g.Expect(prod.Status.Artifact).To(BeNil(), "a forged health published the failed release")
	w := prod.Status.Promotion.Waiting
	f.g.Expect(w).To(HaveLen(1))
	f.g.Expect(gate(w[0], kclv1.GateUpstream).Open).To(BeFalse())
	f.g.Expect(gate(w[0], kclv1.GateUpstream).Message).To(ContainSubstring("dev saw these inputs fail"))
}

// A release the upstream applied but has not proved healthy yet, forged healthy two hours back,
// does not shorten the soak: the soak starts when the controller saw it healthy.
func TestForgedHealthyAtShortensNoSoak(t *testing.T) {
	f, dev, prod := soakingStage(t)
	digest := dev.Status.Artifact.Digest

	forgeHistory(f, dev)
	f.requestReconcile(prod) // woken by the forged status, as by any change of dev's history
	f.g.Expect(prod.Status.Artifact).To(BeNil(), "a forged health published the release")
	f.requestReconcile(dev)
	repairedEvent(f, dev, digest)
	f.requestReconcile(prod)
	f.g.Expect(prod.Status.Artifact).To(BeNil(), "a forged healthyAt ended the soak")
	f.g.Expect(gate(prod.Status.Promotion.Waiting[0], kclv1.GateUpstream).Open).To(BeFalse())

	// healthy for real: the soak counts from then, an hour
	f.healthy(dev)
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(prod), prod)).To(Succeed())
		g.Expect(gate(prod.Status.Promotion.Waiting[0], kclv1.GateSoak).OpensAt).NotTo(BeNil())
		g.Expect(prod.Status.Promotion.Waiting[0].Gates).To(ContainElement(HaveField("Name", kclv1.GateSoak)))
		g.Expect(gate(prod.Status.Promotion.Waiting[0], kclv1.GateSoak).OpensAt.Time).To(BeTemporally(">", time.Now().Add(50*time.Minute)))
	}, timeout, interval).Should(Succeed())
	f.g.Expect(prod.Status.Artifact).To(BeNil())
}

// The recorded approver is the one the admitted annotation names, never a name written into the
// waiting entry's status.
func TestRecordedApproverIsTheAnnotations(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	dev := f.waitReady(f.stage("dev", "", nil))
	prod := f.stage("prod", "dev", func(p *kclv1.Promotion) { p.Approval = kclv1.ApprovalRequired })
	f.healthy(dev)
	f.waiting(prod, "v1", 1)
	waitCondition(f, prod, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.WaitingForApprovalReason)

	f.g.Eventually(func() error {
		if err := k8sClient.Get(f.ctx, client.ObjectKeyFromObject(prod), prod); err != nil {
			return err
		}
		at := metav1.Now()
		prod.Status.Promotion.Waiting[0].ApprovedBy, prod.Status.Promotion.Waiting[0].ApprovedAt = "someone-else", &at
		return k8sClient.Status().Update(f.ctx, prod)
	}, timeout, interval).Should(Succeed())
	f.approve(prod, prod.Status.Promotion.Waiting[0].Digest, "bob")
	prod = f.published(prod, "v1")
	f.g.Expect(prod.Status.History[0].Promotion).NotTo(BeNil())
	f.g.Expect(prod.Status.History[0].Promotion.ApprovedBy).To(Equal("bob"))
	f.g.Eventually(func() []string { return messages(eventsReceiver.of(prod)) }, timeout, interval).
		Should(ContainElement(HaveSuffix("approved by bob")))
	f.g.Expect(messages(eventsReceiver.of(prod))).NotTo(ContainElement(ContainSubstring("someone-else")))
}

// A stage follows an upstream of another namespace only with the upstream's consent; without it
// the stage says AccessDenied with what to add, and learns nothing of whether it exists.
func TestStageAcrossNamespacesNeedsConsent(t *testing.T) {
	devNS := newFixture(t)
	devNS.commit("v1", map[string]string{"main.k": program})
	dev := devNS.waitReady(devNS.stage("dev", "", nil))

	prodNS := newFixture(t)
	prodNS.commit("v1", map[string]string{"main.k": program})
	prod := prodNS.create("prod", func(s *kclv1.KCLArtifactSpec) {
		s.Arguments = map[string]string{"env": "prod"}
		s.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "dev", Namespace: devNS.ns}}
	})
	want := "spec.promotion.from: KCLArtifact " + devNS.ns + "/dev does not exist or does not allow stages of namespace " +
		prodNS.ns + " to follow it: its owner adds the annotation " + kclv1.FollowersAnnotation + ": " + prodNS.ns + " to it"
	prodNS.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(prodNS.ctx, client.ObjectKeyFromObject(prod), prod)).To(Succeed())
		g.Expect(conditions.GetReason(prod, "Ready")).To(Equal(acl.AccessDeniedReason))
		g.Expect(conditions.GetMessage(prod, "Ready")).To(Equal(want))
	}, timeout, interval).Should(Succeed())
	prodNS.g.Expect(prod.Status.Artifact).To(BeNil())

	// the same message for a name that does not exist there
	prodNS.update(prod, func(s *kclv1.KCLArtifactSpec) { s.Promotion.From.Name = "nothing" })
	prodNS.g.Eventually(func() string {
		_ = k8sClient.Get(prodNS.ctx, client.ObjectKeyFromObject(prod), prod)
		return conditions.GetMessage(prod, "Ready")
	}, timeout, interval).Should(Equal(strings.Replace(want, "/dev ", "/nothing ", 1)))
	prodNS.update(prod, func(s *kclv1.KCLArtifactSpec) { s.Promotion.From.Name = "dev" })

	// consent: the stage renders ahead, and publishes what dev ran healthy
	devNS.g.Eventually(func() error {
		devNS.get(dev)
		dev.Annotations = map[string]string{kclv1.FollowersAnnotation: "other, " + prodNS.ns}
		return k8sClient.Update(devNS.ctx, dev)
	}, timeout, interval).Should(Succeed())
	w := prodNS.waiting(prod, "v1", 1)
	prodNS.g.Expect(gate(w, kclv1.GateUpstream).Open).To(BeFalse())
	devNS.healthy(dev)
	prod = prodNS.published(prod, "v1")
	prodNS.g.Expect(prod.Status.History[0].Promotion).NotTo(BeNil())
	prodNS.g.Expect(prod.Status.History[0].Promotion.Upstream).To(Equal(devNS.ns + "/dev"))
	prodNS.g.Expect(prod.Status.Promotion.Upstream).To(Equal(devNS.ns + "/dev"))
	prodNS.g.Expect(prod.Status.History[0].Digest).NotTo(Equal(dev.Status.Artifact.Digest), "prod renders its own program")
}
