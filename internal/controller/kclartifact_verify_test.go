package controller

import (
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promcheck"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// errorRate is the share of the demo application's requests answered 500 over the last 5s; the
// exporter plays the application (no Pods run in envtest: the node suite has the real one).
const errorRate = `sum(rate(demo_app_requests_total{code="500"}[5s])) / sum(rate(demo_app_requests_total[5s]))`

// verifyErrorRate is spec.verify checking errorRate against prometheus: below 10%, every second
// for duration, failed at the second failed run.
func verifyErrorRate(prometheus string, duration time.Duration) *kclv1.Verify {
	return &kclv1.Verify{Interval: &metav1.Duration{Duration: time.Second}, Duration: metav1.Duration{Duration: duration}, FailureLimit: 2,
		Checks: []kclv1.VerifyCheck{{Name: "error-rate", Prometheus: kclv1.PrometheusQuery{Address: prometheus, Query: errorRate}, Condition: "value < 0.1"}}}
}

// entryOfDigest is obj's history entry of digest.
func entryOfDigest(f *fixture, obj *kclv1.KCLArtifact, digest string) kclv1.ArtifactHistoryEntry {
	f.t.Helper()
	for _, e := range obj.Status.History {
		if e.Digest == digest {
			return e
		}
	}
	f.t.Fatalf("%s has no history entry %s", obj.Name, digest)
	return kclv1.ArtifactHistoryEntry{}
}

// A release healthy by kustomize-controller's checks whose error rate rises fails its
// verification in dev and is rolled back; staging, which promotes only what dev verified, never
// publishes it. A good release passes and flows. Prometheus stopped during a verification: the
// checks wait, nothing is rolled back, and they pass once it is back. Real Prometheus, scraping
// an exporter that plays the application's metrics.
func TestVerificationByMetrics(t *testing.T) {
	prom, exp := fluxenv.StartMetrics(t)
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	dev := f.waitReady(f.create("dev", func(s *kclv1.KCLArtifactSpec) {
		s.Arguments = map[string]string{"env": "dev"}
		s.Remediation = &kclv1.Remediation{}
		s.Verify = verifyErrorRate(prom.URL(), 3*time.Second)
	}))
	staging := f.stage("staging", "dev", nil)

	t.Run("a good release passes and flows", func(t *testing.T) {
		began := time.Now()
		f.healthy(dev)
		waitCondition(f, dev, kclv1.VerifiedCondition, metav1.ConditionTrue, kclv1.VerificationPassedReason)
		v := dev.Status.History[0].Verification
		f.g.Expect(v.Result).To(Equal(kclv1.VerificationPassed))
		f.g.Expect(v.Checks[0].Passes).To(BeNumerically(">=", 1))
		f.g.Expect(v.Checks[0].Value).To(Equal("0"))
		staging = f.published(staging, "v1")
		f.g.Expect(gateNames(staging)).To(BeEmpty())
		t.Logf("healthy to verified to promoted: %s", time.Since(began).Round(100*time.Millisecond))
	})
	v1 := dev.Status.Artifact.Digest
	stagingV1 := staging.Status.Artifact.Digest

	t.Run("an error rate that rises fails the release: rolled back, never promoted", func(t *testing.T) {
		exp.SetErrorRatio(0.5)
		f.commit("v2", map[string]string{"main.k": programAt("2")})
		dev = f.waitRevision(dev, "v2")
		v2 := dev.Status.Artifact.Digest
		w := f.waiting(staging, "v2", 1)
		f.g.Expect(gate(w, kclv1.GateVerified).Name).To(Equal(kclv1.GateVerified))
		f.g.Expect(gate(w, kclv1.GateVerified).Open).To(BeFalse())
		healthyAt := time.Now()
		f.healthy(dev)
		dev = waitRemediated(f, dev, metav1.ConditionTrue, kclv1.RolledBackReason)
		t.Logf("healthy to rolled back for its error rate: %s", time.Since(healthyAt).Round(100*time.Millisecond))
		f.g.Expect(dev.Status.Artifact.Digest).To(Equal(v1))
		q := dev.Status.Remediation.Quarantined
		f.g.Expect(q.Digest).To(Equal(v2))
		f.g.Expect(q.Failure.Reason).To(Equal(kclv1.VerificationFailedReason))
		f.g.Expect(q.Failure.Message).To(ContainSubstring("check error-rate failed 2 of 2 allowed times"))
		failed := entryOfDigest(f, dev, v2)
		f.g.Expect(failed.Health).To(Equal(kclv1.HealthHealthy), "kustomize-controller's checks passed: only the metrics failed it")
		f.g.Expect(failed.Verification.Result).To(Equal(kclv1.VerificationFailed))
		f.g.Expect(failed.Verification.Checks[0].Failures).To(Equal(2))
		waitCondition(f, staging, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.UpstreamFailedReason)
		for range 3 {
			f.requestReconcile(staging)
			f.get(staging)
			f.g.Expect(staging.Status.Artifact.Digest).To(Equal(stagingV1), "staging published a release that failed its verification")
		}
	})

	t.Run("Prometheus down: the checks wait, nothing is rolled back", func(t *testing.T) {
		exp.SetErrorRatio(0)
		// what Prometheus holds before it stops is the good rate: the checks after its return
		// read the window before the stop too
		f.g.Eventually(func(g Gomega) {
			samples, err := prom.Query(f.ctx, errorRate)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(samples).To(HaveLen(1))
			g.Expect(samples[0].Value).To(BeNumerically("<", 0.01))
		}, timeout, interval).Should(Succeed())
		f.g.Expect(prom.Stop()).To(Succeed())
		f.commit("v3", map[string]string{"main.k": programAt("3")})
		dev = f.waitRevision(dev, "v3")
		v3 := dev.Status.Artifact.Digest
		f.healthy(dev)
		waitCondition(f, dev, kclv1.VerifiedCondition, metav1.ConditionUnknown, kclv1.VerificationWaitingReason)
		f.get(dev)
		f.g.Expect(conditions.GetMessage(dev, kclv1.VerifiedCondition)).To(ContainSubstring("connection refused"))
		for range 3 {
			f.requestReconcile(dev)
			f.get(dev)
			f.g.Expect(dev.Status.Artifact.Digest).To(Equal(v3), "rolled back because Prometheus was down")
			f.g.Expect(entryOfDigest(f, dev, v3).Verification.Checks[0].Failures).To(BeZero())
		}
		f.get(staging)
		f.g.Expect(staging.Status.SourceRevision).NotTo(Equal("main@sha1:v3"))

		f.g.Expect(prom.Start()).To(Succeed())
		waitCondition(f, dev, kclv1.VerifiedCondition, metav1.ConditionTrue, kclv1.VerificationPassedReason)
		f.published(staging, "v3")
	})
}

// gateNames are the gates of staging's newest waiting artifact; none when nothing waits.
func gateNames(obj *kclv1.KCLArtifact) []string {
	var names []string
	if p := obj.Status.Promotion; p != nil && len(p.Waiting) > 0 {
		for _, g := range p.Waiting[0].Gates {
			names = append(names, g.Name)
		}
	}
	return names
}

// Checks that cannot work are each a clear condition, the artifact served stays served, and
// nothing is rolled back for them.
func TestBadChecks(t *testing.T) {
	prom, _ := fluxenv.StartMetrics(t)
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	for _, tc := range []struct {
		name      string
		mutate    func(*kclv1.VerifyCheck)
		verdict   string
		message   string
		atCompile bool
	}{
		{"a query that does not parse", func(c *kclv1.VerifyCheck) { c.Prometheus.Query = "sum(rate(x[5s]" }, string(promcheck.Invalid),
			"Prometheus refused the query", false},
		{"a condition that does not compile", func(c *kclv1.VerifyCheck) { c.Condition = "value <" }, "", "check error-rate:", true},
		{"a condition that is not a bool", func(c *kclv1.VerifyCheck) { c.Condition = "value + 1.0" }, "", "not a bool", true},
		{"an address in a private range", func(c *kclv1.VerifyCheck) { c.Prometheus.Address = "http://10.0.0.1:9090" }, string(promcheck.Invalid),
			"not allowed", false},
		{"a Secret that does not exist", func(c *kclv1.VerifyCheck) {
			c.Prometheus.SecretRef = &kclv1.LocalObjectReference{Name: "missing"}
		}, "", "prometheus.secretRef", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "bad-" + time.Now().Format("150405.000000")[7:]
			obj := f.waitReady(f.create(name, func(s *kclv1.KCLArtifactSpec) {
				s.Arguments = map[string]string{"env": name}
				s.Remediation = &kclv1.Remediation{}
				s.Verify = verifyErrorRate(prom.URL(), time.Second)
				tc.mutate(&s.Verify.Checks[0])
			}))
			served := obj.Status.Artifact.Digest
			f.healthy(obj)
			waitCondition(f, obj, kclv1.VerifiedCondition, metav1.ConditionFalse, kclv1.InvalidCheckReason)
			f.get(obj)
			msg := conditions.GetMessage(obj, kclv1.VerifiedCondition)
			f.g.Expect(msg).To(ContainSubstring(tc.message))
			t.Logf("%s: Verified=False %s: %s", tc.name, kclv1.InvalidCheckReason, msg)
			if !tc.atCompile {
				f.g.Expect(obj.Status.History[0].Verification.Checks[0].Verdict).To(Equal(tc.verdict))
			}
			f.requestReconcile(obj)
			f.get(obj)
			f.g.Expect(obj.Status.Artifact.Digest).To(Equal(served))
			f.g.Expect(conditions.Has(obj, kclv1.RemediatedCondition)).To(BeFalse())
			f.g.Expect(conditions.IsTrue(obj, meta.ReadyCondition)).To(BeTrue())
			f.g.Expect(k8sClient.Delete(f.ctx, obj)).To(Succeed())
			f.g.Eventually(func() bool { return k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj) != nil }, timeout, interval).Should(BeTrue())
		})
	}
}

// The checks of spec.verify are a map keyed by name (+listType=map): the API server refuses two
// checks of one name, which a verdict (status.verification.checks) could not tell apart, and
// server-side apply merges checks by name.
func TestVerifyCheckNamesAreUnique(t *testing.T) {
	f := newFixture(t)
	v := verifyErrorRate("http://prometheus.invalid:9090", time.Minute)
	v.Checks = append(v.Checks, v.Checks[0])
	v.Checks[1].Condition = "value < 0.5"
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "twice", Namespace: f.ns}, Spec: kclv1.KCLArtifactSpec{
		SourceRef: kclv1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: f.repo.Name}, Interval: metav1.Duration{Duration: time.Hour}, Verify: v}}
	err := k8sClient.Create(f.ctx, obj)
	f.g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "two checks of one name were admitted: %v", err)
	f.g.Expect(err.Error()).To(ContainSubstring(`spec.verify.checks[1]: Duplicate value: {"name":"error-rate"}`))
	t.Log(err)
}
