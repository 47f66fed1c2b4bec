package eventqueue

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	kuberecorder "k8s.io/client-go/tools/record"
)

const (
	timeout  = 30 * time.Second
	interval = 10 * time.Millisecond
)

// Recording returns while the receiver has not answered: the witness is Flux's own HTTP client,
// which gives up on an unanswered attempt after 5 s and tries again, all within one call of
// Flux's recorder (about 40 s). The call must be back long before the first attempt is given up.
func TestRecordingDoesNotWaitForTheReceiver(t *testing.T) {
	recv := newReceiver(t)
	recv.hold("app")
	flux, kube := fluxRecorder(t, recv.URL)
	q := New(flux, Options{DrainTimeout: 10 * time.Millisecond})
	t.Cleanup(q.Close)
	var rec kuberecorder.EventRecorder = q

	returned := make(chan struct{})
	go func() {
		rec.AnnotatedEventf(configMap("app"), map[string]string{"k": "v"}, corev1.EventTypeNormal, "Changed", "one %s", "change")
		rec.Event(configMap("app"), corev1.EventTypeWarning, "Failed", "two")
		rec.Eventf(configMap("app"), corev1.EventTypeNormal, "Changed", "three")
		close(returned)
	}()
	select {
	case <-returned:
	case <-recv.abandoned:
		t.Fatal("recording an event still waited when the HTTP client gave up its first attempt on the receiver")
	}
	// the post is under way and unanswered; the Kubernetes Events are recorded already
	if name := within(t, recv.arrived, "post of the event"); name != "app" {
		t.Fatalf("posted an event of %q", name)
	}
	if len(kube.Events) != 3 {
		t.Fatalf("%d Kubernetes Events recorded, want 3", len(kube.Events))
	}
	if got := recv.messages("app"); len(got) != 0 {
		t.Fatalf("the held receiver answered %v", got)
	}
}

// Each object's events arrive in the order recorded; an object whose receiver does not answer
// holds one worker, and the other objects' events go on arriving meanwhile, through the other
// worker of their namespace's share (two of four).
func TestPostsInOrderPerObjectAndPastASlowObject(t *testing.T) {
	g := NewWithT(t)
	recv := newReceiver(t)
	recv.hold("slow")
	flux, _ := fluxRecorder(t, recv.URL)
	q := New(flux, Options{Workers: 4})
	t.Cleanup(q.Close)

	var wg sync.WaitGroup
	for _, name := range []string{"slow", "fast-a", "fast-b"} {
		wg.Go(func() {
			for i := range 5 {
				q.Eventf(configMap(name), corev1.EventTypeNormal, "Step", "%s %d", name, i)
			}
		})
	}
	wg.Wait()
	for _, name := range []string{"fast-a", "fast-b"} {
		g.Eventually(func() []string { return recv.messages(name) }, timeout, interval).Should(Equal(numbered(name, 5)))
	}
	g.Expect(recv.messages("slow")).To(BeEmpty(), "the held receiver answered")
	within(t, recv.arrived, "post of the slow object's first event")

	recv.release("slow")
	g.Eventually(func() []string { return recv.messages("slow") }, timeout, interval).Should(Equal(numbered("slow", 5)))
}

func numbered(name string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%s %d", name, i))
	}
	return out
}

// Many callers on many objects at once: what each caller recorded about an object arrives in
// the order it recorded it. Run with -race.
func TestOrderPerObjectUnderConcurrency(t *testing.T) {
	g := NewWithT(t)
	recv := newReceiver(t)
	flux, _ := fluxRecorder(t, recv.URL)
	q := New(flux, Options{Size: 10_000, Workers: 3})
	t.Cleanup(q.Close)
	const callers, objects, rounds = 6, 6, 20

	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for i := range rounds {
				for o := range objects {
					q.Eventf(configMap(fmt.Sprint("obj-", o)), corev1.EventTypeNormal, "Step", "%d %d", c, i)
				}
			}
		})
	}
	wg.Wait()
	for o := range objects {
		name := fmt.Sprint("obj-", o)
		g.Eventually(func() []string { return recv.messages(name) }, timeout, interval).Should(HaveLen(callers * rounds))
		last := map[int]int{}
		for _, m := range recv.messages(name) {
			var c, i int
			_, err := fmt.Sscanf(m, "%d %d", &c, &i)
			g.Expect(err).NotTo(HaveOccurred())
			if prev, seen := last[c]; seen {
				g.Expect(i).To(Equal(prev+1), "%s: caller %d's events out of order", name, c)
			}
			last[c] = i
		}
	}
}

// A full queue drops the event, counts it and says so once, without its message; the caller
// goes on and the Kubernetes Event is recorded.
func TestFullQueueDropsAndCounts(t *testing.T) {
	g := NewWithT(t)
	recv := newReceiver(t)
	recv.hold("app")
	flux, kube := fluxRecorder(t, recv.URL)
	var log capture
	q := New(flux, Options{Size: 2, Workers: 1, Log: log.logger()})
	t.Cleanup(q.Close)
	full := testutil.ToFloat64(droppedTotal.WithLabelValues(dropQueueFull, "ns"))

	q.Event(configMap("app"), corev1.EventTypeNormal, "First", "first")
	within(t, recv.arrived, "post of the first event") // out of the queue, being posted
	q.Event(configMap("app"), corev1.EventTypeNormal, "Second", "second")
	q.Event(configMap("app"), corev1.EventTypeNormal, "Third", "third")
	g.Expect(testutil.ToFloat64(droppedTotal.WithLabelValues(dropQueueFull, "ns"))).To(Equal(full))
	q.Event(configMap("app"), corev1.EventTypeWarning, "Fourth", "the fourth message")

	g.Expect(testutil.ToFloat64(droppedTotal.WithLabelValues(dropQueueFull, "ns"))).To(Equal(full + 1))
	g.Expect(kube.Events).To(HaveLen(4))
	lines := log.all()
	g.Expect(lines).To(HaveLen(1))
	g.Expect(lines[0]).To(ContainSubstring(`"reason"="Fourth"`))
	g.Expect(lines[0]).To(ContainSubstring(`"name"="app"`))
	g.Expect(lines[0]).To(ContainSubstring(`"why"="queue_full"`))
	g.Expect(lines[0]).NotTo(ContainSubstring("fourth message"))

	recv.release("app")
	g.Eventually(func() []string { return recv.messages("app") }, timeout, interval).
		Should(Equal([]string{"first", "second", "third"}))
}

// With a receiver that answers, every event arrives, as Flux's recorder would post it: the
// message formatted, the annotations given and the object's event annotations as they were
// when recorded. Close posts what is queued before it returns.
func TestEverythingArrivesAndCloseDrains(t *testing.T) {
	g := NewWithT(t)
	recv := newReceiver(t)
	flux, _ := fluxRecorder(t, recv.URL)
	q := New(flux, Options{Workers: 2})
	shutdown := testutil.ToFloat64(droppedTotal.WithLabelValues(dropShutdown, "ns"))

	obj := configMap("app")
	obj.Annotations = map[string]string{eventv1.Group + "/token": "before", "other": "x"}
	given := map[string]string{"kcl.contrib.fluxcd.io/revision": "r1"}
	q.AnnotatedEventf(obj, given, corev1.EventTypeWarning, "Failed", "attempt %d of %s", 1, "app")
	obj.Annotations[eventv1.Group+"/token"] = "after"
	given["kcl.contrib.fluxcd.io/revision"] = "changed"
	for i := range 50 {
		q.Eventf(configMap(fmt.Sprint("obj-", i%5)), corev1.EventTypeNormal, "Step", "%d", i)
	}
	q.Close()

	g.Expect(testutil.ToFloat64(droppedTotal.WithLabelValues(dropShutdown, "ns"))).To(Equal(shutdown))
	got := recv.events("app")
	g.Expect(got).To(HaveLen(1))
	g.Expect(got[0].Message).To(Equal("attempt 1 of app"))
	g.Expect(got[0].Severity).To(Equal(eventv1.EventSeverityError))
	g.Expect(got[0].InvolvedObject.Kind).To(Equal("ConfigMap"))
	g.Expect(got[0].InvolvedObject.UID).To(BeEquivalentTo("uid-ns-app"))
	g.Expect(got[0].Metadata).To(Equal(map[string]string{"kcl.contrib.fluxcd.io/revision": "r1",
		eventv1.Group + "/token": "before"}))
	for o := range 5 {
		var want []string
		for i := o; i < 50; i += 5 {
			want = append(want, fmt.Sprint(i))
		}
		g.Expect(recv.messages(fmt.Sprint("obj-", o))).To(Equal(want))
	}
}

// Close with a receiver that never answers returns after the drain timeout, counting what was
// still queued; later events are dropped and counted, their Kubernetes Events recorded.
func TestCloseIsBoundedAndCountsTheRest(t *testing.T) {
	g := NewWithT(t)
	recv := newReceiver(t)
	recv.hold("app")
	flux, kube := fluxRecorder(t, recv.URL)
	var log capture
	q := New(flux, Options{Workers: 1, DrainTimeout: 50 * time.Millisecond, Log: log.logger()})
	shutdown := testutil.ToFloat64(droppedTotal.WithLabelValues(dropShutdown, "ns"))

	for i := range 3 {
		q.Eventf(configMap("app"), corev1.EventTypeNormal, "Step", "%d", i)
	}
	within(t, recv.arrived, "post of the first event")
	closed := make(chan struct{})
	go func() { q.Close(); close(closed) }()
	within(t, closed, "return of Close")
	g.Expect(testutil.ToFloat64(droppedTotal.WithLabelValues(dropShutdown, "ns"))).To(Equal(shutdown + 2))

	q.Event(configMap("app"), corev1.EventTypeNormal, "Late", "late")
	g.Expect(testutil.ToFloat64(droppedTotal.WithLabelValues(dropShutdown, "ns"))).To(Equal(shutdown + 3))
	g.Expect(kube.Events).To(HaveLen(4))
	g.Expect(strings.Join(log.all(), "\n")).To(And(ContainSubstring(`"count"=2`), ContainSubstring(`"reason"="Late"`)))
}

// Without an events address nothing is queued: the Kubernetes Event is all there is.
func TestNoEventsAddressRecordsKubernetesEventsOnly(t *testing.T) {
	flux, kube := fluxRecorder(t, "")
	q := New(flux, Options{})
	q.Event(configMap("app"), corev1.EventTypeNormal, "Changed", "x")
	q.Close()
	if len(kube.Events) != 1 {
		t.Fatalf("%d Kubernetes Events, want 1", len(kube.Events))
	}
}

// Trace events are Kubernetes Events only, as with Flux's recorder.
func TestTraceEventsAreNotPosted(t *testing.T) {
	recv := newReceiver(t)
	flux, kube := fluxRecorder(t, recv.URL)
	q := New(flux, Options{})
	q.Event(configMap("app"), eventv1.EventTypeTrace, "Progressing", "x")
	q.Event(configMap("app"), corev1.EventTypeNormal, "Changed", "y")
	q.Close()
	if got := recv.messages("app"); !slices.Equal(got, []string{"y"}) {
		t.Fatalf("posted %v, want [y]", got)
	}
	if len(kube.Events) != 2 {
		t.Fatalf("%d Kubernetes Events, want 2", len(kube.Events))
	}
}
