package controller

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// eventDrops sums kcl_artifact_controller_events_dropped_total{reason="queue_full"} of namespace
// ns ("" for every namespace), as the controller exports it.
func eventDrops(g Gomega, ns string) float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	sum := 0.0
	for _, f := range families {
		if f.GetName() != "kcl_artifact_controller_events_dropped_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if label(m, "reason") == "queue_full" && (ns == "" || label(m, "namespace") == ns) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// The attack of issue 45, finding 3, against the running controller: notification-controller
// hangs on every post of one tenant's namespace (its Alerts and Providers), and that namespace
// records more events than the whole queue holds (1,200 events of its KCLArtifacts, recorded
// through the controller's own recorder as its failing objects would). Another namespace's new
// artifact is announced within 5 s, none of its events dropped; the drops are the attacker's.
func TestAHangingNamespacesEventsDoNotDelayAnothers(t *testing.T) {
	attacker, victim := newFixture(t), newFixture(t)
	g := attacker.g
	release := eventsReceiver.holdNamespace(attacker.ns)
	defer release()
	attacker.commit("x1", map[string]string{"main.k": program})
	held := attacker.waitReady(attacker.create("noisy", nil))
	g.Eventually(func() int { return eventsReceiver.heldPosts(held) }, timeout, interval).Should(BeNumerically(">", 0))

	attackerBefore, victimBefore, allBefore := eventDrops(g, attacker.ns), eventDrops(g, victim.ns), eventDrops(g, "")
	const objects, each = 60, 20
	for i := range each {
		for o := range objects {
			flood := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: attacker.ns, Name: fmt.Sprint("flood-", o),
				UID: types.UID(fmt.Sprint("flood-", o))}}
			testEvents.Eventf(flood, corev1.EventTypeWarning, kclv1.RenderFailedReason, "attempt %d", i)
		}
	}

	victim.commit("v1", map[string]string{"main.k": program})
	created := time.Now()
	obj := victim.waitReady(victim.create("app", nil))
	ready := time.Now()
	g.Eventually(func() []string { return reasons(eventsReceiver.of(obj)) }, 5*time.Second, interval).
		Should(Equal([]string{"info/" + newArtifactReason}), func() string {
			return fmt.Sprintf("the victim's NewArtifact after %s; queue_full drops: victim %.0f, attacker %.0f, all namespaces %.0f",
				time.Since(ready).Round(time.Millisecond), eventDrops(g, victim.ns)-victimBefore,
				eventDrops(g, attacker.ns)-attackerBefore, eventDrops(g, "")-allBefore)
		})
	t.Logf("the victim's NewArtifact delivered by %s after Ready was seen (%s after its KCLArtifact was created); queue_full drops: victim %.0f, attacker %.0f",
		time.Since(ready).Round(time.Millisecond), time.Since(created).Round(time.Millisecond), eventDrops(g, victim.ns)-victimBefore, eventDrops(g, attacker.ns)-attackerBefore)
	g.Expect(eventDrops(g, victim.ns)).To(Equal(victimBefore), "a victim's event was dropped")
	// the queue holds 1,024 and the attacker posts at most two at once: the rest is dropped
	g.Expect(eventDrops(g, attacker.ns) - attackerBefore).To(BeNumerically(">=", objects*each-1024-2))
	g.Expect(eventDrops(g, "") - allBefore).To(Equal(eventDrops(g, attacker.ns) - attackerBefore))
}
