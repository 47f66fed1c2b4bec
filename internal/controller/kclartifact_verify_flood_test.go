package controller

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promcheck"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// A tenant floods the controller with checks against a Prometheus that never answers: four
// KCLArtifacts of three checks each, every second. Its queries hold at most its share of the
// query slots (half of promcheck.DefaultSlots) and its reconciles its share of the workers:
// another tenant's release is verified against a real Prometheus while every one of the
// flooding tenant's releases is still waiting for an answer.
func TestAFloodOfStalledChecksHoldsOnlyItsShare(t *testing.T) {
	prom, _ := fluxenv.StartMetrics(t)
	var inflight, maxInflight, asked atomic.Int64
	stalled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := maxInflight.Load(); n > m && !maxInflight.CompareAndSwap(m, n); m = maxInflight.Load() {
		}
		<-r.Context().Done() // the answer never comes; the controller's deadline ends it
	}))
	t.Cleanup(stalled.Close)

	flood := newFixture(t)
	flood.commit("v1", map[string]string{"main.k": program})
	// healthy first, then all four start their checks at once: set up one by one against the
	// stalled server, each would wait behind the flood already running
	var flooding []*kclv1.KCLArtifact
	for i := range 4 {
		obj := flood.waitReady(flood.create(fmt.Sprintf("flood-%d", i), func(s *kclv1.KCLArtifactSpec) {
			s.Arguments = map[string]string{"env": fmt.Sprint(i)}
		}))
		flooding = append(flooding, flood.healthy(obj))
	}
	for _, obj := range flooding {
		flood.g.Eventually(func() error {
			flood.get(obj)
			obj.Spec.Verify = &kclv1.Verify{Interval: &metav1.Duration{Duration: time.Second}, Duration: metav1.Duration{Duration: time.Hour}}
			for c := range 3 {
				obj.Spec.Verify.Checks = append(obj.Spec.Verify.Checks, kclv1.VerifyCheck{Name: fmt.Sprintf("stalled-%d", c), Condition: "value < 1.0",
					Prometheus: kclv1.PrometheusQuery{Address: stalled.URL, Query: "up"}})
			}
			return k8sClient.Update(flood.ctx, obj)
		}, timeout, interval).Should(Succeed())
	}
	// in full swing: the checks of two of them ran at least once (each run holds its reconcile
	// for the query timeout, 5 s here)
	flood.g.Eventually(func() int {
		started := 0
		for _, o := range flooding {
			flood.get(o)
			if o.Status.History[0].Verification != nil && len(o.Status.History[0].Verification.Checks) > 0 {
				started++
			}
		}
		return started
	}, timeout, interval).Should(BeNumerically(">=", 2), "the flood's checks run against the stalled server")

	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	began := time.Now()
	obj := f.healthy(f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) { s.Verify = verifyErrorRate(prom.URL(), 3*time.Second) })))
	waitCondition(f, obj, kclv1.VerifiedCondition, metav1.ConditionTrue, kclv1.VerificationPassedReason)
	t.Logf("verified %s after it was created, beside the flood (%d stalled queries so far, at most %d at once)",
		time.Since(began).Round(100*time.Millisecond), asked.Load(), maxInflight.Load())

	for _, o := range flooding {
		flood.get(o)
		v := o.Status.History[0].Verification
		if v == nil {
			continue // its checks have not run yet: the flood waits for its own share
		}
		flood.g.Expect(v.Result).To(Equal(kclv1.VerificationRunning), "%s got a verdict from a server that never answers", o.Name)
		flood.g.Expect(conditions.GetReason(o, kclv1.VerifiedCondition)).To(BeElementOf(kclv1.VerificationWaitingReason, kclv1.VerifyingReason))
	}
	flood.g.Expect(maxInflight.Load()).To(BeNumerically("<=", promcheck.DefaultSlots/2), "the flood held more than its share of the query slots")
}
