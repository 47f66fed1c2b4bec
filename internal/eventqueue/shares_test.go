package eventqueue

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
)

// drops is what the queue dropped of namespace ns's events because it was full.
func drops(ns string) float64 {
	return testutil.ToFloat64(droppedTotal.WithLabelValues(dropQueueFull, ns))
}

// held is what namespace ns has: events waiting and objects whose event is being posted.
func (r *Recorder) held(ns string) (queued, posting int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.backlog.namespaces[ns]
	if n == nil {
		return 0, 0
	}
	for k := range n.objects {
		if r.backlog.objects[k].posting {
			posting++
		}
	}
	return n.queued, posting
}

// The attack of issue 45, finding 3: notification-controller hangs on the posts of one
// namespace's events (the tenant chose its Alerts and Providers) and that namespace records far
// more events than the queue holds. Another namespace's events are all posted within 5 s, none
// dropped; what is dropped is the slow namespace's own, and it never holds more than its share of
// the posting workers.
func TestHangingNamespaceHoldsNeitherTheWorkersNorTheQueue(t *testing.T) {
	g := NewWithT(t)
	recv := newReceiver(t)
	recv.holdNamespace("slow")
	flux, _ := fluxRecorder(t, recv.URL)
	q := New(flux, Options{DrainTimeout: 10 * time.Millisecond}) // the production defaults otherwise
	t.Cleanup(q.Close)
	slowBefore, victimBefore := drops("slow"), drops("victim")

	// 1,200 events of 60 objects, more than the queue's 1,024: the slow namespace's share and more
	const objects, each = 60, 20
	for i := range each {
		for o := range objects {
			q.Eventf(configMapIn("slow", fmt.Sprint("obj-", o)), corev1.EventTypeNormal, "Step", "%d", i)
		}
	}
	within(t, recv.arrived, "post of a slow namespace's event") // its posts hang now

	start := time.Now()
	for i := range 3 {
		q.Eventf(configMapIn("victim", "app"), corev1.EventTypeNormal, "NewArtifact", "victim %d", i)
	}
	delivered := func() []string { return recv.messages("app") }
	g.Eventually(delivered, 5*time.Second, interval).Should(Equal(numbered("victim", 3)),
		func() string {
			return fmt.Sprintf("the victim's events after %s: %.0f of them dropped; the slow namespace's drops: %.0f, its posts hanging at once: %d",
				time.Since(start).Round(time.Millisecond), drops("victim")-victimBefore, drops("slow")-slowBefore, recv.mostHanging("slow"))
		})
	t.Logf("the victim's 3 events delivered in %s; drops: victim %.0f, slow %.0f; slow posts hanging at once: %d",
		time.Since(start).Round(time.Millisecond), drops("victim")-victimBefore, drops("slow")-slowBefore, recv.mostHanging("slow"))

	g.Expect(drops("victim")).To(Equal(victimBefore), "a victim's event was dropped")
	// what the slow namespace recorded is queued, being posted or dropped: nothing else is lost
	queued, posting := q.held("slow")
	g.Expect(drops("slow") - slowBefore + float64(queued+posting)).To(BeNumerically("==", objects*each))
	// what the slow namespace recorded is queued, being posted or dropped: nothing else is lost
	g.Expect(drops("slow") - slowBefore).To(BeNumerically(">=", objects*each-DefaultSize))
	g.Expect(recv.mostHanging("slow")).To(BeNumerically("<=", DefaultWorkers/2),
		"the slow namespace held more than its share of the posting workers")
}

// A full queue is shared as max-min fairness shares it: the namespace holding the most gives its
// newest event up to one holding fewer, and one at its share drops its own. What is kept of each
// object is its oldest events, in order.
func TestFullQueueIsSharedByNamespace(t *testing.T) {
	g := NewWithT(t)
	recv := newReceiver(t)
	recv.holdNamespace("block")
	flux, _ := fluxRecorder(t, recv.URL)
	q := New(flux, Options{Size: 10, Workers: 1})
	t.Cleanup(q.Close)
	before := map[string]float64{}
	for _, ns := range []string{"a", "b", "c"} {
		before[ns] = drops(ns)
	}
	// the only worker hangs on block's event: everything else waits in the queue
	q.Event(configMapIn("block", "x"), corev1.EventTypeNormal, "Hold", "hold")
	within(t, recv.arrived, "post of the blocking event")

	for i := range 10 {
		q.Eventf(configMapIn("a", "a"), corev1.EventTypeNormal, "Step", "a %d", i)
	}
	for i := range 10 {
		q.Eventf(configMapIn("b", "b"), corev1.EventTypeNormal, "Step", "b %d", i)
	}
	g.Expect(drops("a") - before["a"]).To(BeNumerically("==", 5))
	g.Expect(drops("b") - before["b"]).To(BeNumerically("==", 5))
	q.Eventf(configMapIn("c", "c"), corev1.EventTypeNormal, "Step", "c %d", 0)
	g.Expect(drops("c")).To(Equal(before["c"]), "a namespace holding nothing dropped its event on a full queue")
	g.Expect(drops("a") + drops("b") - before["a"] - before["b"]).To(BeNumerically("==", 11))

	recv.releaseNamespace("block")
	g.Eventually(func() []string { return recv.messages("c") }, timeout, interval).Should(Equal(numbered("c", 1)))
	g.Eventually(func() int { return len(recv.messages("a")) + len(recv.messages("b")) }, timeout, interval).Should(Equal(9))
	for _, name := range []string{"a", "b"} {
		got := recv.messages(name)
		g.Expect(got).To(Equal(numbered(name, len(got))), "kept the oldest of %s, in order", name)
	}
}
