package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// verifyErrorRate is the share of the demo application's requests answered 500 over the last 5s.
const verifyErrorRate = `sum(rate(demo_app_requests_total{code="500"}[5s])) / sum(rate(demo_app_requests_total[5s]))`

const (
	// verifyDuration is dev's spec.verify.duration; its checks run every second and fail the
	// artifact at the second failed run.
	verifyDuration = 3 * time.Second
	// verifySoak is staging's soak.
	verifySoak = 2 * time.Second
)

// TestVerificationWithFlux: verification by metrics (spec.verify) with the real source-controller
// and kustomize-controller. dev checks the demo application's error rate through a real
// Prometheus (bin/prometheus) once kustomize-controller's health checks pass; staging follows dev
// with a soak and promotes only what dev verified (its gate verified). The metrics come from
// fluxenv's Exporter, which plays the demo application (demo_app_requests_total{code} at 20
// req/s, SetErrorRatio): no Pods run in the e2e environment, there is no kubelet (the node suite
// runs the real application in real Pods). Prometheus is on 127.0.0.1, which the controller
// reaches because the suite starts it with --kcl-deps-allowed-networks=127.0.0.0/8.
//
// A good release is verified and flows to staging; a release healthy by kustomize-controller's
// checks whose error rate is 50% fails its verification, is rolled back (the real
// kustomize-controller applies the previous objects again) and never reaches staging; with
// Prometheus down the checks wait, nothing is rolled back or promoted, and once it is back the
// release is verified and promoted.
func TestVerificationWithFlux(t *testing.T) {
	began := time.Now()
	prom, exp := fluxenv.StartMetrics(t)
	ns := newNamespace(t, "verify")
	target := newNamespace(t, "verify-staging")

	// the application's metrics are in Prometheus before the first release: its checks read
	// a rate from their first run (two scrapes are needed)
	waitErrorRateBelow(t, ns, prom, 0.01)
	t.Logf("the first error rate through Prometheus: %s after StartMetrics began", time.Since(began).Round(100*time.Millisecond))

	rev1 := gitRevision(createRepo(t, ns, stageFiles("1")))
	createGitRepository(t, ns, "app", ns)
	dev := newStage(ns, "dev", "dev", nil)
	dev.Spec.Remediation = &kclv1.Remediation{}
	dev.Spec.Verify = &kclv1.Verify{
		Interval:     &metav1.Duration{Duration: time.Second},
		Duration:     metav1.Duration{Duration: verifyDuration},
		FailureLimit: 2,
		Checks: []kclv1.VerifyCheck{{Name: "error-rate",
			Prometheus: kclv1.PrometheusQuery{Address: prom.URL(), Query: verifyErrorRate},
			Condition:  "value < 0.1"}},
	}
	create(t, dev)
	staging := newStage(ns, "staging", "staging", map[string]string{"namespace": target})
	staging.Spec.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "dev"}, Soak: &metav1.Duration{Duration: verifySoak}}
	create(t, staging)

	devData := func(v string) map[string]string { return map[string]string{"message": "dev", "version": v} }
	stagingData := func(v string) map[string]string { return map[string]string{"message": "staging", "version": v} }
	var v1 string        // dev's digest of rev1
	var stagingV1 string // staging's digest of rev1

	if !t.Run("a good release is verified and promoted", func(t *testing.T) {
		d := waitStageHealthy(t, ns, "dev", rev1)
		v1 = d.Status.Artifact.Digest
		healthyAt := d.Status.History[0].HealthyAt.Time
		healthySeen := time.Now()
		waitConfigMap(t, ns, "web-config", devData("1"))
		d = waitStage(t, ns, "dev", "Verified=True", func(o *kclv1.KCLArtifact) bool {
			c := apimeta.FindStatusCondition(o.Status.Conditions, kclv1.VerifiedCondition)
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == kclv1.VerificationPassedReason &&
				len(o.Status.History) > 0 && o.Status.History[0].Digest == v1
		})
		verifiedSeen := time.Now()
		t.Logf("dev: %s", conditionString(apimeta.FindStatusCondition(d.Status.Conditions, kclv1.VerifiedCondition)))
		v := d.Status.History[0].Verification
		if v == nil || v.Result != kclv1.VerificationPassed || len(v.Checks) != 1 || v.Checks[0].Passes < 1 || v.Checks[0].Failures != 0 ||
			v.Checks[0].Value != "0" {
			t.Errorf("dev: history[0].verification %+v, want Verified with error-rate passed (value 0), no failure", v)
		} else {
			t.Logf("dev: history[0].verification: %s, started %s, ends %s, check %s %s value %s, %d passes",
				v.Result, v.StartedAt.UTC().Format(time.RFC3339), v.EndsAt.UTC().Format(time.RFC3339),
				v.Checks[0].Name, v.Checks[0].Verdict, v.Checks[0].Value, v.Checks[0].Passes)
		}

		s := waitStage(t, ns, "staging", "its artifact of "+rev1+" published", func(o *kclv1.KCLArtifact) bool {
			return o.Status.Artifact != nil && o.Status.Artifact.Metadata[originRevisionKey] == rev1 && len(o.Status.History) > 0
		})
		publishedSeen := time.Now()
		stagingV1 = s.Status.Artifact.Digest
		if rec := s.Status.History[0].Promotion; rec == nil || rec.UpstreamRevision != d.Status.History[0].Revision {
			t.Errorf("staging: history[0].promotion %+v, want dev's %s", rec, d.Status.History[0].Revision)
		}
		if published := s.Status.History[0].LastPublished.Time; v != nil && published.Before(v.EndsAt.Time) {
			t.Errorf("staging published at %s, before dev's verification ended at %s", published, v.EndsAt.Time)
		}
		t.Logf("staging: %s", conditionString(apimeta.FindStatusCondition(s.Status.Conditions, kclv1.PromotedCondition)))
		waitStageApplied(t, ns, "staging", rev1)
		waitConfigMap(t, target, "web-config", stagingData("1"))
		t.Logf("figure: dev healthy (healthyAt %s, seen %s) -> Verified seen after %s (duration %s) -> staging published seen after %s more (lastPublished %s, soak %s)",
			healthyAt.UTC().Format(time.RFC3339), healthySeen.UTC().Format("15:04:05.000"),
			verifiedSeen.Sub(healthySeen).Round(100*time.Millisecond), verifyDuration,
			publishedSeen.Sub(verifiedSeen).Round(100*time.Millisecond),
			s.Status.History[0].LastPublished.UTC().Format(time.RFC3339), verifySoak)
	}) {
		return
	}

	if !t.Run("a release whose error rate rises is rolled back and never promoted", func(t *testing.T) {
		exp.SetErrorRatio(0.5)
		rev2 := commit(t, ns, "v2", stageFiles("2"))
		var v2 string
		d := waitStage(t, ns, "dev", "its artifact of "+rev2+" Healthy by kustomize-controller's checks", func(o *kclv1.KCLArtifact) bool {
			for _, e := range o.Status.History {
				if e.SourceRevision == rev2 && e.Health == kclv1.HealthHealthy && e.HealthyAt != nil {
					v2 = e.Digest
					return true
				}
			}
			return false
		})
		healthySeen := time.Now()
		healthyAt := entryOf(t, d, v2).HealthyAt.Time
		d = waitStage(t, ns, "dev", "the rollback of "+rev2, func(o *kclv1.KCLArtifact) bool {
			return conditionReason(o, kclv1.RemediatedCondition) == kclv1.RolledBackReason &&
				o.Status.Remediation != nil && o.Status.Remediation.Quarantined != nil && o.Status.Remediation.Quarantined.Digest == v2
		})
		rolledBackSeen := time.Now()
		for _, typ := range []string{kclv1.VerifiedCondition, kclv1.RemediatedCondition, "Ready"} {
			t.Logf("dev: %s", conditionString(apimeta.FindStatusCondition(d.Status.Conditions, typ)))
		}
		if c := apimeta.FindStatusCondition(d.Status.Conditions, kclv1.RemediatedCondition); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("dev: %s, want Remediated=True", conditionString(c))
		}
		if c := apimeta.FindStatusCondition(d.Status.Conditions, kclv1.VerifiedCondition); c != nil && c.Status == metav1.ConditionTrue &&
			!strings.Contains(c.Message, v1) {
			t.Errorf("dev: %s after the rollback: not about %s", conditionString(c), v1)
		}
		q := d.Status.Remediation.Quarantined
		t.Logf("dev: quarantined %s (%s) rolled back to %s: %s: %s", q.Digest, q.SourceRevision, q.RolledBackTo, q.Failure.Reason, q.Failure.Message)
		if q.RolledBackTo != v1 || q.SourceRevision != rev2 || q.Failure.Reason != kclv1.VerificationFailedReason ||
			!strings.Contains(q.Failure.Message, "check error-rate failed 2 of 2 allowed times") {
			t.Errorf("dev: quarantine %+v (failure %+v), want %s rolled back to %s for VerificationFailed", q, q.Failure, v2, v1)
		}
		if d.Status.Artifact.Digest != v1 {
			t.Errorf("dev serves %s after the rollback, want v1 %s", d.Status.Artifact.Digest, v1)
		}
		failed := entryOf(t, d, v2)
		if failed.Health != kclv1.HealthHealthy {
			t.Errorf("dev: %s's health %s, want Healthy: kustomize-controller's checks passed, only the metrics failed it", v2, failed.Health)
		}
		if fv := failed.Verification; fv == nil || fv.Result != kclv1.VerificationFailed || len(fv.Checks) != 1 || fv.Checks[0].Failures != 2 {
			t.Errorf("dev: %s's verification %+v, want Failed with 2 failures", v2, fv)
		} else {
			t.Logf("dev: %s's verification: %s, check %s %s value %s, %d failures: %s", v2, fv.Result, fv.Checks[0].Name,
				fv.Checks[0].Verdict, fv.Checks[0].Value, fv.Checks[0].Failures, fv.Checks[0].Message)
		}
		// the real kustomize-controller applies v1's objects again
		waitKustomizationApplied(t, ns, "dev", d.Status.Artifact.Revision)
		waitConfigMap(t, ns, "web-config", devData("1"))
		t.Logf("figure: dev's bad artifact healthy (healthyAt %s) -> rolled back: seen %s later (failure at %s); -> v1's ConfigMap back in the cluster: %s later",
			healthyAt.UTC().Format(time.RFC3339), rolledBackSeen.Sub(healthySeen).Round(100*time.Millisecond),
			q.Failure.At.UTC().Format(time.RFC3339), time.Since(rolledBackSeen).Round(100*time.Millisecond))

		// staging never publishes it: watched over the verification, the soak and a margin,
		// with reconciles asked for while watching
		publishes := countPublishes(t, ns, "staging", stagingV1, verifyDuration+verifySoak+5*time.Second)
		if publishes != 0 {
			t.Errorf("staging published %d times a release dev failed, want 0", publishes)
		}
		s := getStage(t, ns, "staging")
		t.Logf("staging: %s", conditionString(apimeta.FindStatusCondition(s.Status.Conditions, kclv1.PromotedCondition)))
		if p := s.Status.Promotion; p != nil {
			for _, w := range p.Waiting {
				t.Logf("staging: waiting %s of %s: gates %+v", w.Digest, w.SourceRevision, w.Gates)
			}
		}
		expectConfigMap(t, target, "web-config", stagingData("1"))
	}) {
		return
	}

	t.Run("Prometheus down: the checks wait, nothing is rolled back or promoted", func(t *testing.T) {
		exp.SetErrorRatio(0)
		// Prometheus must hold the good rate before it stops: after its restart the window of
		// the query still reads the time before the stop
		waitErrorRateBelow(t, ns, prom, 0.01)
		if err := prom.Stop(); err != nil {
			t.Fatalf("stopping Prometheus: %v", err)
		}
		stopped := time.Now()
		rev3 := commit(t, ns, "v3", stageFiles("3"))
		d := waitStageHealthy(t, ns, "dev", rev3)
		v3 := d.Status.Artifact.Digest
		waitConfigMap(t, ns, "web-config", devData("3"))
		d = waitStage(t, ns, "dev", "Verified=Unknown VerificationWaiting, connection refused", func(o *kclv1.KCLArtifact) bool {
			c := apimeta.FindStatusCondition(o.Status.Conditions, kclv1.VerifiedCondition)
			return c != nil && c.Status == metav1.ConditionUnknown && c.Reason == kclv1.VerificationWaitingReason &&
				strings.Contains(c.Message, "connection refused") && o.Status.Artifact.Digest == v3
		})
		t.Logf("dev: %s", conditionString(apimeta.FindStatusCondition(d.Status.Conditions, kclv1.VerifiedCondition)))
		// several reconciles, each past the interval: still v3, no failure counted
		for i := range 3 {
			token := annotateReconcile(t, &kclv1.KCLArtifact{}, ns, "dev")
			d = waitStage(t, ns, "dev", "reconcile request "+token+" handled", func(o *kclv1.KCLArtifact) bool {
				return o.Status.LastHandledReconcileAt == token
			})
			e := entryOf(t, d, v3)
			if d.Status.Artifact.Digest != v3 {
				t.Errorf("dev serves %s after reconcile %d with Prometheus down, want v3 %s (rolled back?)", d.Status.Artifact.Digest, i+1, v3)
			}
			if e.Verification == nil || len(e.Verification.Checks) != 1 || e.Verification.Checks[0].Failures != 0 ||
				e.Verification.Result != kclv1.VerificationRunning {
				t.Errorf("dev: v3's verification after reconcile %d: %+v, want Verifying with no failure", i+1, e.Verification)
			} else {
				c := e.Verification.Checks[0]
				t.Logf("dev: reconcile %d: v3's check %s %s (%d passes, %d failures): %s", i+1, c.Name, c.Verdict, c.Passes, c.Failures, c.Message)
			}
		}
		if c := apimeta.FindStatusCondition(d.Status.Conditions, kclv1.RemediatedCondition); c != nil && c.Reason == kclv1.RolledBackReason &&
			d.Status.Remediation != nil && d.Status.Remediation.Quarantined != nil && d.Status.Remediation.Quarantined.Digest == v3 {
			t.Errorf("dev rolled back v3 while Prometheus was down: %s", conditionString(c))
		}
		// staging, watched past dev's soak: its verified gate stays closed
		watch := max(3*time.Second, time.Until(entryOf(t, d, v3).HealthyAt.Add(verifySoak+3*time.Second)))
		if n := countPublishes(t, ns, "staging", stagingV1, watch); n != 0 {
			t.Errorf("staging published %d times while dev's verification waited, want 0", n)
		}
		s := getStage(t, ns, "staging")
		t.Logf("staging: %s", conditionString(apimeta.FindStatusCondition(s.Status.Conditions, kclv1.PromotedCondition)))
		if p := s.Status.Promotion; p != nil {
			for _, w := range p.Waiting {
				if w.SourceRevision == rev3 {
					t.Logf("staging: waiting %s of %s: gate verified %+v", w.Digest, w.SourceRevision, gate(w, kclv1.GateVerified))
				}
			}
		}
		expectConfigMap(t, target, "web-config", stagingData("1"))

		if err := prom.Start(); err != nil {
			t.Fatalf("starting Prometheus again: %v", err)
		}
		restarted := time.Now()
		// what the check said on the way back, each change logged with its time since the restart:
		// "no sample" until Prometheus has scraped twice since its start
		seen := ""
		d = waitStage(t, ns, "dev", "Verified=True once Prometheus is back", func(o *kclv1.KCLArtifact) bool {
			for _, e := range o.Status.History {
				if e.Digest == v3 && e.Verification != nil && len(e.Verification.Checks) == 1 {
					c := e.Verification.Checks[0]
					if now := fmt.Sprintf("%s value %q (%d passes, %d failures): %s", c.Verdict, c.Value, c.Passes, c.Failures, c.Message); now != seen {
						seen = now
						t.Logf("dev: +%s after the restart: v3's check %s", time.Since(restarted).Round(100*time.Millisecond), now)
					}
				}
			}
			c := apimeta.FindStatusCondition(o.Status.Conditions, kclv1.VerifiedCondition)
			return c != nil && c.Status == metav1.ConditionTrue && c.Reason == kclv1.VerificationPassedReason && o.Status.Artifact.Digest == v3
		})
		verifiedSeen := time.Now()
		t.Logf("dev: %s", conditionString(apimeta.FindStatusCondition(d.Status.Conditions, kclv1.VerifiedCondition)))
		if v := entryOf(t, d, v3).Verification; v == nil || v.Result != kclv1.VerificationPassed || v.Checks[0].Failures != 0 {
			t.Errorf("dev: v3's verification %+v, want Verified with no failure", v)
		}
		waitStageApplied(t, ns, "staging", rev3)
		publishedSeen := time.Now()
		waitConfigMap(t, target, "web-config", stagingData("3"))
		t.Logf("figure: Prometheus down for %s; back -> dev Verified seen after %s -> staging published and applied %s later",
			restarted.Sub(stopped).Round(100*time.Millisecond), verifiedSeen.Sub(restarted).Round(100*time.Millisecond),
			publishedSeen.Sub(verifiedSeen).Round(100*time.Millisecond))
	})
}

// waitErrorRateBelow waits until Prometheus answers the error rate query with one sample below limit.
func waitErrorRateBelow(t *testing.T, ns string, prom *fluxenv.Prometheus, limit float64) {
	t.Helper()
	waitFor(t, ns, fmt.Sprintf("the error rate below %g through Prometheus", limit), func(ctx context.Context) (bool, string, error) {
		samples, err := prom.Query(ctx, verifyErrorRate)
		if err != nil {
			return false, err.Error(), nil
		}
		return len(samples) == 1 && samples[0].Value < limit, fmt.Sprintf("samples %v", samples), nil
	})
}

// entryOf is obj's history entry of digest.
func entryOf(t *testing.T, obj *kclv1.KCLArtifact, digest string) kclv1.ArtifactHistoryEntry {
	t.Helper()
	for _, e := range obj.Status.History {
		if e.Digest == digest {
			return e
		}
	}
	t.Fatalf("%s/%s has no history entry %s", obj.Namespace, obj.Name, digest)
	return kclv1.ArtifactHistoryEntry{}
}

// countPublishes watches the stage for d, asking for a reconcile every second, and counts its
// publishes: a change of status.artifact's digest away from served, or of its history (a new
// entry, or history[0] published again).
func countPublishes(t *testing.T, ns, name, served string, d time.Duration) int {
	t.Helper()
	first := getStage(t, ns, name)
	if first.Status.Artifact == nil || first.Status.Artifact.Digest != served || len(first.Status.History) == 0 {
		t.Fatalf("%s: %s, want it serving %s", name, kclArtifactState(first), served)
	}
	entries, lastPublished := len(first.Status.History), first.Status.History[0].LastPublished
	publishes := 0
	digest := served
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		token := annotateReconcile(t, &kclv1.KCLArtifact{}, ns, name)
		o := waitStage(t, ns, name, "reconcile request "+token+" handled", func(o *kclv1.KCLArtifact) bool {
			return o.Status.LastHandledReconcileAt == token
		})
		if o.Status.Artifact == nil || o.Status.Artifact.Digest != digest || len(o.Status.History) != entries ||
			!o.Status.History[0].LastPublished.Equal(&lastPublished) {
			publishes++
			t.Errorf("%s published: %s", name, stageState(o))
			if o.Status.Artifact != nil {
				digest = o.Status.Artifact.Digest
			}
			entries = len(o.Status.History)
			if entries > 0 {
				lastPublished = o.Status.History[0].LastPublished
			}
		}
		// the next request a second later: each reconcile is waited for above, this paces them
		select {
		case <-t.Context().Done():
			return publishes
		case <-time.After(time.Second):
		}
	}
	return publishes
}
