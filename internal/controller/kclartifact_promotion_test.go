package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/acl"
	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// There is no kustomize-controller in envtest: the upstream's health is written as it would
// (playKustomizeController, playKustomizeFailure). Promotion with the real one, across two API
// servers, is in test/e2e (TestHubAndSpoke) and on the node (test/node/promotion_test.go).

// stage creates a KCLArtifact of program with env=name following upstream.
func (f *fixture) stage(name, upstream string, p func(*kclv1.Promotion)) *kclv1.KCLArtifact {
	return f.create(name, func(s *kclv1.KCLArtifactSpec) {
		s.Arguments = map[string]string{"env": name}
		if upstream != "" {
			s.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: upstream}}
			if p != nil {
				p(s.Promotion)
			}
		}
	})
}

// healthy has the KCLArtifact's current artifact applied and healthy.
func (f *fixture) healthy(obj *kclv1.KCLArtifact) *kclv1.KCLArtifact {
	f.t.Helper()
	f.get(obj)
	playKustomizeController(f, obj.Name, obj.Status.Artifact.Revision)
	waitHealth(f, obj, obj.Status.Artifact.Digest, kclv1.HealthHealthy)
	return obj
}

// waiting waits until the stage's newest waiting artifact was rendered from rev, and returns it.
func (f *fixture) waiting(obj *kclv1.KCLArtifact, rev string, n int) kclv1.WaitingArtifact {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.Promotion).NotTo(BeNil())
		g.Expect(obj.Status.Promotion.Waiting).To(HaveLen(n))
		g.Expect(obj.Status.Promotion.Waiting[0].SourceRevision).To(Equal("main@sha1:" + rev))
	}, timeout, interval).Should(Succeed())
	return obj.Status.Promotion.Waiting[0]
}

func (f *fixture) published(obj *kclv1.KCLArtifact, rev string) *kclv1.KCLArtifact {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.Artifact).NotTo(BeNil())
		g.Expect(obj.Status.SourceRevision).To(Equal("main@sha1:" + rev))
	}, timeout, interval).Should(Succeed())
	return obj
}

func (f *fixture) approve(obj *kclv1.KCLArtifact, digest, by string) {
	f.t.Helper()
	f.annotate(obj, map[string]string{kclv1.ApproveAnnotation: digest, kclv1.ApprovedByAnnotation: by})
}

// annotate sets annotations of obj as its owner; an empty value removes one.
func (f *fixture) annotate(obj *kclv1.KCLArtifact, annotations map[string]string) {
	f.t.Helper()
	f.g.Eventually(func() error {
		f.get(obj)
		if obj.Annotations == nil {
			obj.Annotations = map[string]string{}
		}
		for k, v := range annotations {
			if v == "" {
				delete(obj.Annotations, k)
			} else {
				obj.Annotations[k] = v
			}
		}
		return k8sClient.Update(f.ctx, obj)
	}, timeout, interval).Should(Succeed())
}

func gate(w kclv1.WaitingArtifact, name string) kclv1.GateStatus {
	for _, g := range w.Gates {
		if g.Name == name {
			return g
		}
	}
	return kclv1.GateStatus{Name: "absent"}
}

// A stage renders ahead and publishes only once the upstream ran the same inputs healthy for the
// soak; while it waits it renders nothing.
func TestStageWaitsForUpstreamHealthAndSoak(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	dev := f.waitReady(f.stage("dev", "", nil))
	soak := 2 * time.Second
	staging := f.stage("staging", "dev", func(p *kclv1.Promotion) { p.Soak = &metav1.Duration{Duration: soak} })

	w := f.waiting(staging, "v1", 1)
	f.g.Expect(staging.Status.Artifact).To(BeNil())
	waitCondition(f, staging, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.UpstreamNotHealthyReason)
	f.g.Expect(conditions.GetMessage(staging, kclv1.PromotedCondition)).To(ContainSubstring("dev runs these inputs"))
	f.waitFor(staging, metav1.ConditionFalse, kclv1.UpstreamNotHealthyReason)
	f.g.Expect(gate(w, kclv1.GateSoak).Open).To(BeFalse())
	// rendered ahead: its rendered YAML can be read before it is published
	code, body := fetch(f.g, w.URL)
	f.g.Expect(code).To(Equal(200))
	f.g.Expect(body).NotTo(BeEmpty())

	before := rendersIn.of(f.ns)
	f.requestReconcile(staging) // a reconcile while waiting renders nothing
	f.healthy(dev)
	f.get(dev)
	healthyAt := dev.Status.History[0].HealthyAt.Time
	staging = f.published(staging, "v1")
	publishedAt := time.Now()
	f.g.Expect(rendersIn.of(f.ns)).To(Equal(before), "renders while waiting")
	h := staging.Status.History[0]
	f.g.Expect(h.Promotion).NotTo(BeNil())
	f.g.Expect(h.Promotion.Upstream).To(Equal("dev"))
	f.g.Expect(h.Promotion.UpstreamRevision).To(Equal(dev.Status.Artifact.Revision))
	f.g.Expect(h.LastPublished.Time).NotTo(BeTemporally("<", healthyAt.Add(soak)), "published before the soak ended")
	// the gate opens a second after healthyAt + soak: healthyAt is kept in whole seconds
	t.Logf("soak gate open → staging published (observed by the test's poll every 100ms): %s", publishedAt.Sub(healthyAt.Add(soak+time.Second)).Round(time.Millisecond))
	f.g.Expect(staging.Status.Promotion.Waiting).To(BeEmpty())
	waitCondition(f, staging, kclv1.PromotedCondition, metav1.ConditionTrue, kclv1.PromotedReason)
	f.waitReady(staging)
	// the stage's own arguments: the same source, its own output
	f.g.Eventually(func(g Gomega) string { _, b := fetch(g, latestYAML(staging)); return b }, timeout, interval).Should(ContainSubstring("app-staging"))
	f.g.Eventually(func() []string { return messages(eventsReceiver.of(staging)) }, timeout, interval).
		Should(ContainElement(MatchRegexp(`^staging now runs main@sha1:v1, healthy in dev for \d+s$`)))
	var promotedEvent *eventv1.Event
	for _, e := range eventsReceiver.of(staging) {
		if e.Reason == kclv1.PromotedReason {
			promotedEvent = &e
		}
	}
	f.g.Expect(promotedEvent).NotTo(BeNil())
	f.g.Expect(promotedEvent.Metadata).To(HaveKeyWithValue(kclv1.GroupVersion.Group+"/"+eventv1.MetaOriginRevisionKey, "main@sha1:v1"))
}

// Render ahead with the source moving on: the proven revision's stored artifact is published
// although source-controller serves another one; approval by digest, recorded with who; the
// approval of a digest that is not waiting changes nothing.
func TestRenderAheadApprovalAndTheSourceMovingOn(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	dev := f.waitReady(f.stage("dev", "", nil))
	prod := f.stage("prod", "dev", func(p *kclv1.Promotion) { p.Approval = kclv1.ApprovalRequired })
	f.healthy(dev)
	f.waiting(prod, "v1", 1)
	waitCondition(f, prod, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.WaitingForApprovalReason)
	// read with the condition: the first waiting state seen may predate dev's health
	v1 := prod.Status.Promotion.Waiting[0]
	f.g.Expect(gate(v1, kclv1.GateUpstream).Open).To(BeTrue())

	f.commit("v2", map[string]string{"main.k": strings.Replace(program, `or 1`, `or 2`, 1)})
	f.waitRevision(dev, "v2")
	v2 := f.waiting(prod, "v2", 2)
	// v1 is approved, but dev moved on to v2, not healthy yet: v1 waits for that
	f.approve(prod, v1.Digest, "alice")
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(prod), prod)).To(Succeed())
		g.Expect(prod.Status.Promotion.Waiting).To(HaveLen(2))
		g.Expect(gate(prod.Status.Promotion.Waiting[1], kclv1.GateApproval).Open).To(BeTrue())
		g.Expect(gate(prod.Status.Promotion.Waiting[1], kclv1.GateUpstream).Message).To(ContainSubstring("dev moved on to"))
	}, timeout, interval).Should(Succeed())
	f.g.Expect(prod.Status.Artifact).To(BeNil())

	before := rendersIn.of(f.ns)
	f.healthy(dev)
	prod = f.published(prod, "v1")
	f.g.Expect(prod.Status.Artifact.Digest).To(Equal(v1.Digest))
	f.get(f.repo)
	f.g.Expect(f.repo.Status.Artifact.Revision).To(Equal("main@sha1:v2"), "the source moved on")
	h := prod.Status.History[0]
	f.g.Expect(h.Promotion.ApprovedBy).To(Equal("alice"))
	f.g.Expect(h.Promotion.ApprovedAt).NotTo(BeNil())
	f.g.Expect(prod.Status.Promotion.Waiting).To(HaveLen(1))
	f.g.Expect(prod.Status.Promotion.Waiting[0].Digest).To(Equal(v2.Digest))
	waitCondition(f, prod, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.WaitingForApprovalReason)
	f.g.Expect(rendersIn.of(f.ns)).To(Equal(before), "renders while waiting")
	// what an approver reads first: the waiting artifact against what runs
	code, diff := fetch(f.g, fmt.Sprintf("%s/kclartifact/%s/prod/diff?from=%s&to=%s&token=%s", artifactURL, f.ns, v1.Digest, v2.Digest, testStorage.Token(f.ns, "prod", prod.UID)))
	f.g.Expect(code).To(Equal(200), diff)
	f.g.Expect(diff).To(ContainSubstring(`-  replicas: "1"`))
	f.g.Expect(diff).To(ContainSubstring(`+  replicas: "2"`))

	// an approval naming no waiting artifact: a clear event, nothing published
	bogus := "sha256:" + strings.Repeat("0", 64)
	f.approve(prod, bogus, "mallory")
	f.g.Eventually(func() []string { return messages(eventsReceiver.of(prod)) }, timeout, interval).
		Should(ContainElement(ContainSubstring("the approval of " + bogus + " names no waiting artifact (waiting: " + v2.Digest + ")")))
	// the event goes out before the reconcile's status write: wait for the status too
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(prod), prod)).To(Succeed())
		g.Expect(prod.Status.Promotion.RejectedApproval).To(Equal(bogus))
	}, timeout, interval).Should(Succeed())
	f.g.Expect(prod.Status.Artifact.Digest).To(Equal(v1.Digest))

	f.approve(prod, v2.Digest, "bob")
	prod = f.published(prod, "v2")
	f.g.Expect(prod.Status.History[0].Promotion.ApprovedBy).To(Equal("bob"))
	f.g.Expect(prod.Status.History[1].Promotion.ApprovedBy).To(Equal("alice"))
	waitCondition(f, prod, kclv1.PromotedCondition, metav1.ConditionTrue, kclv1.PromotedReason)
}

// Inputs the upstream saw fail and roll back are never promoted; the rollback does not move
// the stage backwards either.
func TestUpstreamFailureIsNeverPromoted(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	dev := f.waitReady(f.create("dev", func(s *kclv1.KCLArtifactSpec) {
		s.Arguments = map[string]string{"env": "dev"}
		s.Remediation = &kclv1.Remediation{}
	}))
	staging := f.stage("staging", "dev", nil)
	f.healthy(dev)
	staging = f.published(staging, "v1")
	served := staging.Status.Artifact.Digest

	f.commit("v2", map[string]string{"main.k": strings.Replace(program, `or 1`, `or 2`, 1)})
	dev = f.waitRevision(dev, "v2")
	f.waiting(staging, "v2", 1)
	f.get(dev)
	playKustomizeFailure(f, "dev", dev.Status.Artifact.Revision, meta.HealthCheckFailedReason, healthCheckFailed)
	waitRemediated(f, dev, metav1.ConditionTrue, kclv1.RolledBackReason)
	waitCondition(f, staging, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.UpstreamFailedReason)
	f.get(staging)
	f.g.Expect(conditions.GetMessage(staging, kclv1.PromotedCondition)).To(ContainSubstring("dev saw these inputs fail"))
	f.g.Expect(staging.Status.Artifact.Digest).To(Equal(served))
	f.g.Expect(staging.Status.History).To(HaveLen(1), "the stage published nothing: not v2, and not v1 again")
	// dev's rolled-back artifact (v1, healthy again) is older than what staging serves: nothing moves
	f.requestReconcile(staging)
	f.g.Expect(staging.Status.Artifact.Digest).To(Equal(served))
}

// A closed window holds a promotion; a window open now lets it through.
func TestWindowHoldsAPromotion(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	dev := f.waitReady(f.stage("dev", "", nil))
	later := time.Now().UTC().Add(30 * time.Minute)
	closedWindow := kclv1.PromotionWindow{Schedule: fmt.Sprintf("%d %d * * *", later.Minute(), later.Hour()), Duration: metav1.Duration{Duration: time.Minute}}
	staging := f.stage("staging", "dev", func(p *kclv1.Promotion) { p.Windows = []kclv1.PromotionWindow{closedWindow} })
	f.healthy(dev)
	waitCondition(f, staging, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.OutsideWindowReason)
	w := f.waiting(staging, "v1", 1)
	g := gate(w, kclv1.GateWindow)
	f.g.Expect(g.OpensAt).NotTo(BeNil())
	f.g.Expect(g.OpensAt.Time.UTC().Format("15:04")).To(Equal(later.Format("15:04")))
	f.g.Expect(staging.Status.Artifact).To(BeNil())

	f.update(staging, func(s *kclv1.KCLArtifactSpec) {
		s.Promotion.Windows = append(s.Promotion.Windows, kclv1.PromotionWindow{Schedule: "* * * * *", Duration: metav1.Duration{Duration: time.Minute}})
	})
	f.published(staging, "v1")
}

// Every bad input of a promotion is a clear status, and what is served stays served.
func TestBadPromotionInputs(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})

	a := f.stage("a", "b", nil)
	b := f.stage("b", "a", nil)
	f.waitFor(a, metav1.ConditionFalse, kclv1.PromotionCycleReason)
	f.g.Expect(conditions.GetMessage(a, meta.ReadyCondition)).To(ContainSubstring("the stages follow each other in a cycle: a → b → a"))
	f.waitFor(b, metav1.ConditionFalse, kclv1.PromotionCycleReason)
	f.g.Expect(conditions.IsStalled(b)).To(BeTrue())

	other := f.stage("other", "dev", func(p *kclv1.Promotion) { p.From.Namespace = "kube-system" })
	f.waitFor(other, metav1.ConditionFalse, acl.AccessDeniedReason)
	f.g.Expect(conditions.GetMessage(other, meta.ReadyCondition)).To(ContainSubstring(
		"KCLArtifact kube-system/dev does not exist or does not allow stages of namespace " + f.ns + " to follow it"))
	f.g.Expect(conditions.IsStalled(other)).To(BeFalse(), "consent given later is seen: retried, not stalled")

	bad := f.stage("badwindow", "dev", func(p *kclv1.Promotion) {
		p.Windows = []kclv1.PromotionWindow{{Schedule: "61 * * * *", Duration: metav1.Duration{Duration: time.Minute}}}
	})
	f.waitFor(bad, metav1.ConditionFalse, kclv1.InvalidWindowReason)
	f.g.Expect(conditions.GetMessage(bad, meta.ReadyCondition)).To(ContainSubstring(`spec.promotion.windows[0] ("61 * * * *")`))

	missing := f.stage("missing", "nobody", nil)
	waitCondition(f, missing, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.UpstreamNotFoundReason)
	f.waitFor(missing, metav1.ConditionFalse, kclv1.UpstreamNotFoundReason)

	// the upstream deleted while an artifact waits: the stage keeps serving what it has
	dev := f.waitReady(f.stage("dev", "", nil))
	staging := f.stage("staging", "dev", nil)
	f.healthy(dev)
	staging = f.published(staging, "v1")
	served := staging.Status.Artifact.DeepCopy()
	f.commit("v2", map[string]string{"main.k": strings.Replace(program, `or 1`, `or 2`, 1)})
	f.waiting(staging, "v2", 1)
	f.g.Expect(k8sClient.Delete(f.ctx, dev)).To(Succeed())
	waitCondition(f, staging, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.UpstreamNotFoundReason)
	f.waitReady(staging)
	f.g.Expect(staging.Status.Artifact.Digest).To(Equal(served.Digest))
	code, body := fetch(f.g, latestYAML(staging))
	f.g.Expect(code).To(Equal(200))
	f.g.Expect(body).To(ContainSubstring(`replicas: "1"`))

	// a pin wins over the promotion: the waiting artifact stays waiting
	f.update(staging, func(s *kclv1.KCLArtifactSpec) { s.PinnedDigest = served.Digest })
	f.waitFor(staging, metav1.ConditionTrue, kclv1.PinnedReason)
	f.g.Expect(staging.Status.Promotion.Waiting).To(HaveLen(1))
	f.g.Expect(staging.Status.Artifact.Digest).To(Equal(served.Digest))
}

// A broken commit does not hold back what already waits: the proven artifact is promoted, and
// the stage says that its render failed.
func TestABrokenRenderDoesNotHoldBackAProvenArtifact(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	dev := f.waitReady(f.stage("dev", "", nil))
	prod := f.stage("prod", "dev", func(p *kclv1.Promotion) { p.Approval = kclv1.ApprovalRequired })
	f.healthy(dev)
	v1 := f.waiting(prod, "v1", 1)
	f.commit("v2", map[string]string{"main.k": "_x = 1 +\n"})
	f.waitFor(prod, metav1.ConditionFalse, kclv1.RenderFailedReason)
	f.approve(prod, v1.Digest, "alice")
	prod = f.published(prod, "v1")
	f.g.Expect(prod.Status.Artifact.Digest).To(Equal(v1.Digest))
	f.waitFor(prod, metav1.ConditionFalse, kclv1.RenderFailedReason)
	f.g.Expect(conditions.GetMessage(prod, meta.ReadyCondition)).To(ContainSubstring("still serving the last good artifact " + prod.Status.Artifact.Revision))
	f.g.Expect(messages(eventsReceiver.of(prod))).To(ContainElement(HavePrefix("prod now runs main@sha1:v1")))
	f.g.Expect(gateWaitObservations(f.ns, kclv1.GateApproval)).To(BeNumerically("==", 1))
}

// gateWaitObservations counts the promotion gate waits observed for a namespace and gate.
func gateWaitObservations(namespace, gate string) uint64 {
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != "kcl_artifact_controller_promotion_gate_wait_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == namespace && labels["gate"] == gate {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}

// All gates at once: each is listed, and the artifact is published only when the last opens.
func TestGatesTogether(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	dev := f.waitReady(f.stage("dev", "", nil))
	prod := f.stage("prod", "dev", func(p *kclv1.Promotion) {
		p.Soak = &metav1.Duration{Duration: time.Second}
		p.Windows = []kclv1.PromotionWindow{{Schedule: "* * * * *", Duration: metav1.Duration{Duration: time.Minute}}}
		p.Approval = kclv1.ApprovalRequired
	})
	w := f.waiting(prod, "v1", 1)
	var names []string
	for _, g := range w.Gates {
		names = append(names, g.Name)
	}
	f.g.Expect(names).To(Equal([]string{kclv1.GateUpstream, kclv1.GateSoak, kclv1.GateWindow, kclv1.GateApproval}))
	f.approve(prod, w.Digest, "alice")
	waitCondition(f, prod, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.UpstreamNotHealthyReason)
	f.healthy(dev)
	prod = f.published(prod, "v1")
	h := prod.Status.History[0].Promotion
	f.g.Expect(h.ApprovedBy).To(Equal("alice"))
	f.g.Expect(prod.Status.History[0].LastPublished.Time).NotTo(BeTemporally("<", h.HealthySince.Add(time.Second)))
	for _, gate := range names {
		f.g.Expect(gateWaitObservations(f.ns, gate)).To(BeNumerically("==", 1), gate)
	}
}
