package node

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// nodeErrorRate is the share of the demo application's answers of GET / that were 500 over the
// last 10s. Prometheus scrapes every second, so the window holds about ten samples; it is short
// so that the samples of a rollout (the old and the new Pod behind the one target, counters
// seen to reset) leave it well within spec.verify.duration after the release is healthy.
const nodeErrorRate = `sum(rate(demo_app_requests_total{code="500"}[10s])) / sum(rate(demo_app_requests_total[10s]))`

// TestVerificationOnTheNode: spec.verify against a real Prometheus in the node's network, scraping
// the real demo application's Pods. A release with error_ratio 0.5 is applied and healthy by
// kustomize-controller's checks (its Pods answer, half of GET / with a deliberate 500, /healthz
// stays 200), then fails its error-rate check twice and is rolled back and quarantined
// (VerificationFailed); the Pods answer the first release's message again, without errors. A
// stage following it (staging, applying into a namespace of its own) publishes a release only
// once it is verified: release 1 not before, release 2 never.
func TestVerificationOnTheNode(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "verify")
	// ONE replica: Prometheus scrapes the Service's ClusterIP as a single static target, so the
	// series demo_app_requests_total{code} must come from one Pod. With two, each scrape would
	// reach either Pod and the counter would jump between their values, which rate() reads as
	// resets: the error rate would be noise.
	settings := func(message string, errorRatio float64) map[string]string {
		return map[string]string{"kcl.yaml": settingsFile(map[string]any{"message": message, "replicas": 1, "error_ratio": errorRatio})}
	}

	// Prometheus listens on the node's address inside its network namespace: it reaches the
	// Service's ClusterIP there, and the controller's Pod reaches it at 10.200.0.1, which the
	// suite's install allows (--kcl-deps-allowed-networks). Its port is picked free there now;
	// it starts once the Service exists.
	promAddr := freeNodeAddr(t)
	sha1 := createRepo(t, ns, "verify", "node-app", settings("r1", 0))
	obj := appArtifact(ns, "verify")
	obj.Spec.Remediation = &kclv1.Remediation{}
	obj.Spec.Verify = &kclv1.Verify{Interval: &metav1.Duration{Duration: 2 * time.Second},
		Duration: metav1.Duration{Duration: 20 * time.Second}, FailureLimit: 2,
		Checks: []kclv1.VerifyCheck{{Name: "error-rate", Condition: "value < 0.1",
			Prometheus: kclv1.PrometheusQuery{Address: "http://" + promAddr, Query: nodeErrorRate}}}}
	create(t, obj)
	stagingNS := ns + "-staging"
	targetNamespace(t, stagingNS, ns)
	staging := appArtifact(ns, "verify")
	staging.Name = "staging"
	staging.Spec.Kustomization.TargetNamespace = stagingNS
	staging.Spec.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "app"}}
	create(t, staging)
	waitApplied(t, ns, "app", gitRevision(sha1))
	waitAnswers(t, ns, "r1", "")
	// Prometheus is not there yet: app cannot be verified, and staging holds release 1 at its
	// gate verified
	var early string
	waitFor(t, "staging holding release 1 at its gate verified", func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, "staging")
		if err != nil {
			return false, "", err
		}
		if obj.Status.Artifact != nil {
			early = obj.Status.Artifact.Revision
			return true, "", nil
		}
		if obj.Status.Promotion == nil || len(obj.Status.Promotion.Waiting) == 0 {
			return false, kclState(obj), nil
		}
		w := obj.Status.Promotion.Waiting[0]
		g := gateOf(w, kclv1.GateVerified)
		return w.SourceRevision == gitRevision(sha1) && g != nil && !g.Open, fmt.Sprintf("gates %+v; %s", w.Gates, kclState(obj)), nil
	})
	if early != "" {
		t.Fatalf("staging published %s before app was verified", early)
	}

	// the demo application counts only its answers of GET /: steady traffic from inside the node
	traffic := sendTraffic(t, ns)
	var svc corev1.Service
	if err := suite.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-app"}, &svc); err != nil {
		t.Fatal(err)
	}
	prom := startNodePrometheus(t, promAddr, net.JoinHostPort(svc.Spec.ClusterIP, "80"))

	// release 1: its checks wait (Prometheus down, then no rate yet), pass, and it is verified
	verified := waitVerified(t, ns, metav1.ConditionTrue, kclv1.VerificationPassedReason)
	v1 := servedHistoryEntry(t, verified)
	if v1.SourceRevision != gitRevision(sha1) || v1.Verification == nil || v1.Verification.Result != kclv1.VerificationPassed {
		t.Fatalf("release 1's entry is %+v, want verified", v1)
	}
	t.Logf("release 1 verified: %s", conditions.GetMessage(verified, kclv1.VerifiedCondition))
	if samples, err := prom.Query(ctx, nodeErrorRate); err != nil || len(samples) != 1 || samples[0].Value != 0 {
		t.Fatalf("the error rate of release 1 in Prometheus is %+v (%v), want one sample of 0", samples, err)
	}
	stagingV1, _ := waitApplied(t, ns, "staging", gitRevision(sha1))
	stagingDigest := stagingV1.Status.Artifact.Digest

	// release 2: half of GET / answered 500, healthy by kustomize-controller's checks
	committed := time.Now()
	sha2 := commit(t, "verify", "error_ratio 0.5", settings("r2", 0.5))
	v2 := waitHealth(t, ns, "app", gitRevision(sha2), kclv1.HealthHealthy)
	healthyAt := v2.HealthyAt.Time
	t.Logf("release 2 healthy at %s (%s)", healthyAt.Format("15:04:05"), v2.Digest)
	waitFor(t, "release 2's Pod answering r2", func(context.Context) (bool, string, error) {
		return traffic.answered("r2") > 0 && traffic.errors500() > 0, traffic.String(), nil
	})

	rolled := waitRolledBackTo(t, ns, "app", v1.Digest, "release 2 rolled back for its error rate")
	rolledAt := time.Now()
	rolledSeen := rolledAt.Sub(healthyAt)
	// when the error rate rose, read from Prometheus' own data: the first 500 release 2's Pod
	// answered, and the first evaluation of the check's query at or above its threshold
	first500 := firstAtOrAbove(t, prom, `sum(demo_app_requests_total{code="500"})`, 1, committed, rolledAt)
	rose := firstAtOrAbove(t, prom, nodeErrorRate, 0.1, committed, rolledAt)
	t.Logf("error rate rose at %s (first 500 at %s, release 2 healthy at %s); rollback seen after %.1f s",
		rose.Format("15:04:05"), first500.Format("15:04:05"), healthyAt.Format("15:04:05"), rolledAt.Sub(rose).Seconds())
	if !rolledAt.After(rose) || rose.Before(first500) {
		t.Errorf("the error rate rose at %s (first 500 at %s), the rollback was seen at %s: want the 500s, then the rise, then the rollback",
			rose.Format(time.RFC3339Nano), first500.Format(time.RFC3339Nano), rolledAt.Format(time.RFC3339Nano))
	}
	figure("verify: error rate rising to rollback seen", rolledAt.Sub(rose))
	q := quarantineOf(t, rolled)
	if q.Digest != v2.Digest || q.Failure.Reason != kclv1.VerificationFailedReason ||
		!strings.Contains(q.Failure.Message, "check error-rate failed 2 of 2 allowed times") {
		t.Errorf("status.remediation.quarantined is %+v, want %s failed by its check error-rate (%s)", q, v2.Digest, kclv1.VerificationFailedReason)
	}
	figure("verify: release 2 healthy to verification failed", q.Failure.At.Sub(healthyAt))
	// the failure needs two failing evaluations of the check: not before the rise (Failure.At
	// holds whole seconds; the range query's points are a second apart)
	if q.Failure.At.Time.Before(rose.Add(-time.Second)) {
		t.Errorf("release 2 failed its verification at %s, before its error rate rose (%s)", q.Failure.At.Format(time.RFC3339), rose.Format(time.RFC3339Nano))
	}
	figure("verify: error rate rising to verification failed", q.Failure.At.Sub(rose))
	figure("verify: release 2 healthy to rollback seen", rolledSeen)
	failed, _ := historyEntry(rolled, v2.Digest)
	if failed.Health != kclv1.HealthHealthy {
		t.Errorf("release 2's entry is %q, want Healthy: only its metrics failed it", failed.Health)
	}
	if v := failed.Verification; v == nil || v.Result != kclv1.VerificationFailed || len(v.Checks) != 1 || v.Checks[0].Failures != 2 {
		t.Errorf("release 2's verification is %+v, want Failed with 2 failures", v)
	} else if value, err := strconv.ParseFloat(v.Checks[0].Value, 64); err != nil || value < 0.1 {
		t.Errorf("release 2's error rate is %q, want at least 0.1", v.Checks[0].Value)
	} else {
		t.Logf("release 2 failed: %s", conditions.GetMessage(rolled, kclv1.VerifiedCondition))
	}

	// release 1's Pod answers again, every time
	waitRolledOut(t, ns, "r1", goodImage, v1.Revision)
	waitAnswers(t, ns, "r1", "")
	figure("verify: release 2 healthy to r1 answering", time.Since(healthyAt))
	for range 20 {
		a, err := askApp(ctx, ns)
		if err != nil || a.Message != "r1" {
			t.Fatalf("after the rollback the application answered %+v, %v; want r1", a, err)
		}
	}
	t.Logf("traffic: %s", traffic.String())
	// the release rolled back to keeps its verdict: Verified holds again
	waitVerified(t, ns, metav1.ConditionTrue, kclv1.VerificationPassedReason)

	// staging never publishes release 2: it says its upstream failed, and keeps release 1
	waitFor(t, "staging Promoted=False "+kclv1.UpstreamFailedReason, func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, "staging")
		if err != nil {
			return false, "", err
		}
		c := conditions.Get(obj, kclv1.PromotedCondition)
		if c != nil && c.Status == metav1.ConditionFalse && c.Reason == kclv1.UpstreamFailedReason {
			t.Logf("staging: Promoted=False %s: %s", c.Reason, c.Message)
			return true, "", nil
		}
		return false, kclState(obj), nil
	})
	for range 10 {
		obj, err := getKCLArtifact(ctx, ns, "staging")
		if err != nil {
			t.Fatal(err)
		}
		if obj.Status.Artifact == nil || obj.Status.Artifact.Digest != stagingDigest || obj.Status.SourceRevision != gitRevision(sha1) {
			t.Fatalf("staging left release 1: %s", kclState(obj))
		}
		for _, e := range obj.Status.History {
			if e.SourceRevision == gitRevision(sha2) {
				t.Fatalf("staging published release 2, which failed its verification: %s", historyOf(obj))
			}
		}
		time.Sleep(time.Second)
	}

	t.Run("checks pointed at the controller or another tenant's Service are refused", func(t *testing.T) {
		snoopOnTheNode(t, ns, stagingNS)
	})
}

// snoopOnTheNode: a tenant points the checks of its own KCLArtifact at the controller Pod's
// metrics and at the demo application of another namespace, through its Service's name. The
// network guard refuses both (the install allows only the node's address): each check is
// Invalid, the KCLArtifact says InvalidCheck naming the address, and nothing was sent.
func snoopOnTheNode(t *testing.T, ns, otherNS string) {
	pod, err := controllerPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	target := ns + "-snoop"
	targetNamespace(t, target, ns)
	obj := appArtifact(ns, "verify")
	obj.Name = "snoop"
	obj.Spec.Kustomization.TargetNamespace = target
	obj.Spec.Verify = &kclv1.Verify{Interval: &metav1.Duration{Duration: 2 * time.Second}, Duration: metav1.Duration{Duration: 5 * time.Second},
		Checks: []kclv1.VerifyCheck{
			{Name: "controller", Condition: "value >= 0", Prometheus: kclv1.PrometheusQuery{
				Address: "http://" + net.JoinHostPort(pod.Status.PodIP, "8080"), Query: "up"}},
			{Name: "other-tenant", Condition: "value >= 0", Prometheus: kclv1.PrometheusQuery{
				Address: "http://demo-app." + otherNS + ".svc.cluster.local", Query: "up"}},
		}}
	create(t, obj)
	var got *kclv1.KCLArtifact
	waitFor(t, "snoop's checks refused", func(ctx context.Context) (bool, string, error) {
		var err error
		if got, err = getKCLArtifact(ctx, ns, "snoop"); err != nil {
			return false, "", err
		}
		e := servedEntryOf(got)
		if e == nil || e.Verification == nil || len(e.Verification.Checks) != 2 {
			return false, kclState(got), nil
		}
		for _, c := range e.Verification.Checks {
			if c.Verdict != "Invalid" || !strings.Contains(c.Message, "not allowed") {
				return false, fmt.Sprintf("%+v", e.Verification.Checks), nil
			}
		}
		return conditions.GetReason(got, kclv1.VerifiedCondition) == kclv1.InvalidCheckReason, kclState(got), nil
	})
	for _, c := range servedEntryOf(got).Verification.Checks {
		t.Logf("check %s: %s: %s", c.Name, c.Verdict, c.Message)
	}
	if c := conditions.Get(got, kclv1.RemediatedCondition); c != nil {
		t.Errorf("a refused check acted on the artifact: %+v", c)
	}
}

// servedEntryOf is obj's history entry of the artifact it serves, nil when none.
func servedEntryOf(obj *kclv1.KCLArtifact) *kclv1.ArtifactHistoryEntry {
	if obj.Status.Artifact == nil {
		return nil
	}
	for i := range obj.Status.History {
		if obj.Status.History[i].Digest == obj.Status.Artifact.Digest {
			return &obj.Status.History[i]
		}
	}
	return nil
}

// freeNodeAddr is NodeIP and a port free inside the node's network namespace.
func freeNodeAddr(t *testing.T) string {
	t.Helper()
	addr, err := suite.node.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// startNodePrometheus starts the real Prometheus (bin/prometheus) inside the node's namespaces
// (kubenode's StartPrometheus), listening on addr and scraping target every second; it is
// stopped at t's end.
func startNodePrometheus(t *testing.T, addr, target string) *fluxenv.Prometheus {
	t.Helper()
	fluxenv.RequirePrometheus(t)
	logPath := filepath.Join(suite.node.LogDir, "prometheus-"+t.Name()+".log")
	prom, err := suite.node.StartPrometheus(addr, []fluxenv.ScrapeJob{{Name: "demo-app", Targets: []string{target}}},
		t.TempDir(), logPath, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last 40 lines of %s:\n%s", logPath, fluxenv.Tail(logPath, 40))
		}
		if err := prom.Close(); err != nil {
			t.Error(err)
		}
	})
	return prom
}

// firstAtOrAbove is the first time from from to to (a range query, a point every second) at
// which expr gave a value at or above threshold; the test fails when it never did.
func firstAtOrAbove(t *testing.T, prom *fluxenv.Prometheus, expr string, threshold float64, from, to time.Time) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	series, err := prom.QueryRange(ctx, expr, from, to, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var points []string
	for _, s := range series {
		for _, p := range s.Points {
			if p.Value >= threshold {
				return p.At
			}
			points = append(points, fmt.Sprintf("%s %g", p.At.Format("15:04:05"), p.Value))
		}
	}
	t.Fatalf("%s was never at or above %g from %s to %s: %s", expr, threshold, from.Format("15:04:05"), to.Format("15:04:05"), strings.Join(points, ", "))
	return time.Time{}
}

// waitVerified waits until the KCLArtifact app's Verified condition has this status and reason.
func waitVerified(t *testing.T, ns string, status metav1.ConditionStatus, reason string) *kclv1.KCLArtifact {
	t.Helper()
	var obj *kclv1.KCLArtifact
	waitFor(t, fmt.Sprintf("%s/app Verified=%s %s", ns, status, reason), func(ctx context.Context) (bool, string, error) {
		var err error
		if obj, err = getKCLArtifact(ctx, ns, "app"); err != nil {
			return false, "", err
		}
		c := conditions.Get(obj, kclv1.VerifiedCondition)
		return c != nil && c.Status == status && c.Reason == reason, kclState(obj), nil
	})
	return obj
}

// servedHistoryEntry is the history entry of the artifact the KCLArtifact serves.
func servedHistoryEntry(t *testing.T, obj *kclv1.KCLArtifact) kclv1.ArtifactHistoryEntry {
	t.Helper()
	e := servedEntryOf(obj)
	if e == nil {
		t.Fatalf("%s serves no artifact with a history entry: %s", obj.Name, historyOf(obj))
	}
	return *e
}

// appTraffic asks the demo application every 100ms from inside the node and counts its answers:
// by message, the deliberate 500s, and other errors.
type appTraffic struct {
	mu        sync.Mutex
	messages  map[string]int
	failed500 int
	other     int
	lastOther string
}

func (a *appTraffic) answered(message string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.messages[message]
}

func (a *appTraffic) errors500() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.failed500
}

func (a *appTraffic) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Sprintf("answers %v, %d deliberate 500s, %d other errors (last: %s)", a.messages, a.failed500, a.other, a.lastOther)
}

// sendTraffic starts asking the application in the background until t's end. Errors are
// counted, not failures: release 2 answers half of them 500 on purpose, and a rollout may drop
// a request.
func sendTraffic(t *testing.T, ns string) *appTraffic {
	traffic := &appTraffic{messages: map[string]int{}}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			a, err := askApp(ctx, ns)
			cancel()
			traffic.mu.Lock()
			switch {
			case err == nil:
				traffic.messages[a.Message]++
			case strings.Contains(err.Error(), "500 Internal Server Error"):
				traffic.failed500++
			default:
				traffic.other++
				traffic.lastOther = err.Error()
			}
			traffic.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		<-done
	})
	return traffic
}
