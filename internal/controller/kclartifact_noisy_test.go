package controller

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare/fairqueue"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

// The noisy-neighbour attacks of issue 33, each from one namespace while another namespace
// changes one KCLArtifact. The suite runs 2 reconcile workers and 2 render workers, so one
// namespace holds 1 of each; without the shares each attack holds them all for minutes, longer
// than the victim's wait here (the suite's timeout, 60 s).

// victim is a KCLArtifact in its own namespace, Ready before the attack starts.
type victim struct {
	f   *fixture
	obj *kclv1.KCLArtifact
	n   int
}

func newVictim(t *testing.T) *victim {
	v := &victim{f: newFixture(t)}
	v.f.commit("v0", map[string]string{"main.k": program})
	v.obj = v.f.waitReady(v.f.create("victim", nil))
	return v
}

// change commits a new revision and waits until the victim rendered it.
func (v *victim) change() time.Duration {
	v.n++
	rev := fmt.Sprintf("v%d", v.n)
	start := time.Now()
	v.f.commit(rev, map[string]string{"main.k": program + "\n# " + rev + "\n"})
	v.f.waitReady(v.f.waitRevision(v.obj, rev))
	return time.Since(start)
}

// slowDependency answers fast enough for the minimum speed and never finishes: the fetch holds
// its reconcile until --kcl-deps-timeout (2 minutes).
func slowDependency(t *testing.T) *kclmodtest.Hostile {
	return kclmodtest.StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) {
		chunk := strings.Repeat(" ", 4<<10)
		for {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
			rw.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(time.Second):
			}
		}
	})
}

func TestSlowDependenciesDelayNoOtherNamespace(t *testing.T) {
	v := newVictim(t)
	slow := slowDependency(t)
	tenant := newFixture(t)
	tenant.commit("a1", map[string]string{
		"kcl.mod":       appMod(fmt.Sprintf(`k8s = { oci = "oci://%s/kcl-lang/k8s", tag = "1.31.2" }`, slow.Host)),
		"main.k":        k8sProgram,
		"plain/main.k":  program,
		"plain/kcl.mod": "[package]\nname = \"plain\"\nversion = \"0.1.0\"\n",
	})
	var attackers []*kclv1.KCLArtifact
	for i := range 4 {
		attackers = append(attackers, tenant.create(fmt.Sprintf("slow-%d", i), func(s *kclv1.KCLArtifactSpec) {
			s.Timeout = &metav1.Duration{Duration: 100000 * time.Hour}
		}))
	}
	tenant.g.Eventually(slow.Requests, timeout, interval).Should(BeNumerically(">", 0))

	t.Logf("the victim's change was rendered in %s while the slow fetches ran", v.change().Round(time.Millisecond))

	// The tenant's own next object waits behind its in-flight fetch; suspending and deleting the
	// attackers cancels it instead of letting it run out its two minutes.
	plain := tenant.create("plain", func(s *kclv1.KCLArtifactSpec) { s.Path = "plain" })
	for i, a := range attackers {
		if i%2 == 0 {
			tenant.update(a, func(s *kclv1.KCLArtifactSpec) { s.Suspend = true })
		} else {
			tenant.g.Expect(k8sClient.Delete(tenant.ctx, a)).To(Succeed())
		}
	}
	start := time.Now()
	tenant.waitReady(plain)
	t.Logf("the tenant's own object was rendered %s after the attackers were suspended and deleted", time.Since(start).Round(time.Millisecond))
	// the cancelled reconcile wrote nothing: a suspended object is not left "in progress"
	for _, a := range []*kclv1.KCLArtifact{attackers[0], attackers[2]} {
		tenant.g.Expect(k8sClient.Get(tenant.ctx, client.ObjectKeyFromObject(a), a)).To(Succeed())
		tenant.g.Expect(conditions.IsReconciling(a)).To(BeFalse(), "%s: %v", a.Name, a.Status.Conditions)
	}
}

func TestEndlessRendersDelayNoOtherNamespace(t *testing.T) {
	v := newVictim(t)
	tenant := newFixture(t)
	tenant.commit("a1", map[string]string{"main.k": "fib = lambda n: int -> int { n if n < 2 else fib(n - 1) + fib(n - 2) }\nx = fib(60)\n"})
	before := renders.Load()
	for i := range 6 {
		tenant.create(fmt.Sprintf("endless-%d", i), func(s *kclv1.KCLArtifactSpec) {
			s.RetryInterval = &metav1.Duration{Duration: 5 * time.Second}
			s.Timeout = &metav1.Duration{Duration: 100000 * time.Hour}
		})
	}
	tenant.g.Eventually(renders.Load, timeout, interval).Should(BeNumerically(">", before))
	t.Logf("the victim's change was rendered in %s while the endless renders ran", v.change().Round(time.Millisecond))
}

// Renders of about 50 MB each, from two namespaces at once: each is under the output bound, and
// the output budget holds their sum to one at a time; none is lost.
func TestLargeOutputsShareTheOutputBudget(t *testing.T) {
	v := newVictim(t)
	big := "_n = option(\"n\") or \"0\"\n" +
		`[{apiVersion = "v1", kind = "ConfigMap", metadata.name = "big-${i}-${_n}", data.v = "x" * 1000000} for i in range(50)]` + "\n"
	var attackers []*kclv1.KCLArtifact
	var tenants []*fixture
	for range 2 {
		tenant := newFixture(t)
		tenant.commit("a1", map[string]string{"main.k": big})
		for i := range 2 {
			attackers = append(attackers, tenant.create(fmt.Sprintf("big-%d", i), func(s *kclv1.KCLArtifactSpec) {
				s.Arguments = map[string]string{"n": fmt.Sprint(i)}
			}))
			tenants = append(tenants, tenant)
		}
	}
	resetPeakRSS(t)
	before := peakRSS(t)
	t.Logf("the victim's change was rendered in %s while the large renders ran", v.change().Round(time.Millisecond))
	for i, a := range attackers {
		tenants[i].waitReady(a)
		tenants[i].g.Expect(a.Status.Artifact.Size).NotTo(BeNil())
	}
	grew := peakRSS(t) - before
	t.Logf("output budget peak %d MiB of %d MiB; test process peak RSS grew %d MiB", testBudget.Peak()>>20, testBudget.Size()>>20, grew>>20)
	v.f.g.Expect(testBudget.Peak()).To(BeNumerically(">=", 40<<20), "the large outputs were not counted")
	v.f.g.Expect(testBudget.Peak()).To(BeNumerically("<=", testBudget.Size()))
	v.f.g.Expect(testBudget.Used()).To(BeZero(), "a reconcile kept its part of the budget")
}

func TestTightIntervalsDelayNoOtherNamespace(t *testing.T) {
	v := newVictim(t)
	tenant := newFixture(t)
	tenant.commit("a1", map[string]string{"main.k": program})
	var attackers []*kclv1.KCLArtifact
	for i := range 20 {
		attackers = append(attackers, tenant.create(fmt.Sprintf("tight-%d", i), func(s *kclv1.KCLArtifactSpec) {
			s.Interval = metav1.Duration{Duration: time.Millisecond}
		}))
	}
	for _, a := range attackers {
		tenant.waitReady(a)
	}
	t.Logf("the victim's change was rendered in %s beside 20 KCLArtifacts with interval 1ms", v.change().Round(time.Millisecond))
}

// Issue 45, finding 2: a tenant owns several namespaces. With its endless renders spread over
// two of them, at one reconcile worker and one render worker each, the two held every worker of
// the suite until the render timeout (2 minutes). The last free worker is now a fast lane that
// a namespace holding it past the slice loses; the victim waits at most about one slice.
func TestEndlessRendersInTwoNamespacesDelayNoOtherNamespace(t *testing.T) {
	v := newVictim(t)
	quiet := v.change()
	const fib = "fib = lambda n: int -> int { n if n < 2 else fib(n - 1) + fib(n - 2) }\nx = fib(60)\n"
	before := renders.Load()
	for range 2 {
		tenant := newFixture(t)
		tenant.commit("a1", map[string]string{"main.k": fib})
		for i := range 3 {
			a := tenant.create(fmt.Sprintf("endless-%d", i), func(s *kclv1.KCLArtifactSpec) {
				s.RetryInterval = &metav1.Duration{Duration: 5 * time.Second}
				s.Timeout = &metav1.Duration{Duration: 100000 * time.Hour}
			})
			// deleting cancels the render in flight: the next tests get the workers back
			t.Cleanup(func() { _ = k8sClient.Delete(tenant.ctx, a) })
		}
	}
	// both namespaces render: they hold both reconcile workers and both render workers
	v.f.g.Eventually(renders.Load, timeout, interval).Should(BeNumerically(">=", before+2))
	noisy := v.change()
	// The endless renders never end by themselves (timeout 100000h): without the fast lane the
	// victim would wait until waitReady gives up. With it, the victim waits for the holder's
	// slice to run out, then for one reconcile of its own; the margin is for that reconcile on
	// a loaded machine (CI measured 30.58 s against a goal of 2×quiet + 30 s that left 0.2 s).
	goal := fairqueue.Slice + 10*time.Second + 2*quiet
	t.Logf("the victim's change was rendered in %s quiet, %s beside endless renders in two namespaces (goal ≤ %s)",
		quiet.Round(time.Millisecond), noisy.Round(time.Millisecond), goal.Round(time.Millisecond))
	v.f.g.Expect(noisy).To(BeNumerically("<=", goal))
}
