package controller

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/fluxcd/pkg/apis/meta"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

var eventsReceiver *eventReceiver

// eventReceiver is an HTTP server taking the events notification-controller would, decoded as
// Flux's event type.
type eventReceiver struct {
	*httptest.Server
	mu     sync.Mutex
	events []eventv1.Event
	// the events of held objects (namespace/name) are not answered until released
	held     map[string]chan struct{}
	arrivals map[string]int // posts of held objects' events
}

func newEventReceiver() *eventReceiver {
	r := &eventReceiver{held: map[string]chan struct{}{}, arrivals: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var e eventv1.Event
		if err := json.NewDecoder(req.Body).Decode(&e); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !r.wait(req, e.InvolvedObject.Namespace+"/"+e.InvolvedObject.Name) {
			return // the client gave up on this post
		}
		r.mu.Lock()
		r.events = append(r.events, e)
		r.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	return r
}

// hold leaves the events of the object named unanswered, as a notification-controller that
// hangs, until release; a post the client gives up on meanwhile is lost, as it would be.
func (r *eventReceiver) hold(namespace, name string) (release func()) {
	key := namespace + "/" + name
	r.mu.Lock()
	defer r.mu.Unlock()
	c := make(chan struct{})
	r.held[key] = c
	return sync.OnceFunc(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.held, key)
		close(c)
	})
}

// holdNamespace leaves every event of namespace ns unanswered until release: a
// notification-controller slow for one tenant's Alerts and Providers only.
func (r *eventReceiver) holdNamespace(ns string) (release func()) {
	return r.hold(ns, "*")
}

// wait holds a post of a held object until release, or until the client gives up (false).
func (r *eventReceiver) wait(req *http.Request, key string) bool {
	r.mu.Lock()
	c := r.held[key]
	if c == nil {
		ns, _, _ := strings.Cut(key, "/")
		c = r.held[ns+"/*"]
	}
	if c != nil {
		r.arrivals[key]++
	}
	r.mu.Unlock()
	if c == nil {
		return true
	}
	select {
	case <-c:
		return true
	case <-req.Context().Done():
		return false
	}
}

// heldPosts counts the posts of a held object's events that reached the receiver.
func (r *eventReceiver) heldPosts(obj client.Object) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.arrivals[obj.GetNamespace()+"/"+obj.GetName()]
}

// of returns the events received so far about one object.
func (r *eventReceiver) of(obj client.Object) []eventv1.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []eventv1.Event
	for _, e := range r.events {
		if e.InvolvedObject.Namespace == obj.GetNamespace() && e.InvolvedObject.Name == obj.GetName() &&
			e.InvolvedObject.Kind == kclv1.KCLArtifactKind {
			out = append(out, e)
		}
	}
	return out
}

// reasons lists severity/reason of the events, repeats collapsed: a failure is reported again at
// every failed attempt, as by Flux's controllers (notification-controller rate-limits them).
func reasons(events []eventv1.Event) []string {
	var out []string
	for _, e := range events {
		r := e.Severity + "/" + e.Reason
		if len(out) == 0 || out[len(out)-1] != r {
			out = append(out, r)
		}
	}
	return out
}

// A failing render pages someone, and so does its recovery, even when the recovered output is the
// artifact already served (nothing new would be announced otherwise).
func TestEventsReachNotificationController(t *testing.T) {
	f := newFixture(t)
	f.commit("a1", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("alerting", nil))
	served := obj.Status.Artifact.Revision
	group := kclv1.GroupVersion.Group + "/"
	f.g.Eventually(func() []string { return reasons(eventsReceiver.of(obj)) }, timeout, interval).
		Should(Equal([]string{"info/" + newArtifactReason}))
	first := eventsReceiver.of(obj)[0]
	f.g.Expect(first.ReportingController).To(Equal("kcl-artifact-controller"))
	f.g.Expect(first.Metadata).To(HaveKeyWithValue(group+eventv1.MetaRevisionKey, served))
	f.g.Expect(first.Metadata).To(HaveKeyWithValue(group+eventv1.MetaDigestKey, obj.Status.Artifact.Digest))
	f.g.Expect(first.Metadata).To(HaveKeyWithValue(group+eventv1.MetaOriginRevisionKey, "main@sha1:a1"))

	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Path = "missing" })
	f.waitFor(obj, "False", kclv1.RenderFailedReason)
	f.g.Eventually(func() []string { return reasons(eventsReceiver.of(obj)) }, timeout, interval).
		Should(Equal([]string{"info/" + newArtifactReason, "error/" + kclv1.RenderFailedReason}))
	failure := eventsReceiver.of(obj)[1]
	f.g.Expect(failure.Message).To(ContainSubstring(`path "missing" not found`))
	f.g.Expect(failure.Metadata).To(HaveKeyWithValue(group+eventv1.MetaOriginRevisionKey, "main@sha1:a1"))
	f.g.Expect(failure.Metadata).NotTo(HaveKey(group + eventv1.MetaRevisionKey))
	f.g.Expect(failure.Metadata).NotTo(HaveKey(group + eventv1.MetaDigestKey))

	// the fix renders what is already served: no new artifact, yet a recovery event, whose reason
	// is Flux's Succeeded (the Ready reason ArtifactUpToDate describes a condition, not an event)
	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Path = "" })
	f.waitFor(obj, "True", kclv1.ArtifactUpToDateReason)
	f.g.Expect(obj.Status.Artifact.Revision).To(Equal(served))
	f.g.Eventually(func() []string { return reasons(eventsReceiver.of(obj)) }, timeout, interval).
		Should(Equal([]string{"info/" + newArtifactReason, "error/" + kclv1.RenderFailedReason,
			"info/" + meta.SucceededReason}))
	all := eventsReceiver.of(obj)
	f.g.Expect(all[len(all)-1].Message).To(ContainSubstring("recovered: serving artifact " + served))
}

// Waiting for source-controller's first artifact is expected: it is not an alert.
func TestNoWarningWhileTheSourceHasNoArtifact(t *testing.T) {
	f := newFixture(t)
	obj := f.create("waiting", nil)
	f.waitFor(obj, "False", kclv1.SourceNotReadyReason)
	f.commit("b1", map[string]string{"main.k": program})
	f.waitReady(obj)
	// An object's events are posted in the order recorded, so the failed attempts' events came before this one.
	f.g.Eventually(func() []string { return reasons(eventsReceiver.of(obj)) }, timeout, interval).
		Should(ContainElement("info/" + newArtifactReason))
	f.g.Expect(reasons(eventsReceiver.of(obj))).To(Equal([]string{"info/" + newArtifactReason}))
}

// The event of a new artifact says what changed against the one before it, by kind and name with
// no value, and carries the artifact server's diff URL, for an alert to link to.
func TestNewArtifactEventSaysWhatChanged(t *testing.T) {
	f := newFixture(t)
	f.commit("c1", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("changes", nil))
	group := kclv1.GroupVersion.Group + "/"
	f.g.Eventually(func() []string { return reasons(eventsReceiver.of(obj)) }, timeout, interval).
		Should(Equal([]string{"info/" + newArtifactReason}))
	first := eventsReceiver.of(obj)[0]
	f.g.Expect(first.Message).NotTo(ContainSubstring("changed"), "nothing to compare the first artifact with")
	f.g.Expect(first.Metadata).NotTo(HaveKey(group + diffURLKey))

	f.commit("c2", map[string]string{"main.k": strings.Replace(program, `or 1`, `or 2`, 1)})
	obj = f.waitRevision(obj, "c2")
	var second eventv1.Event
	f.g.Eventually(func() int {
		all := eventsReceiver.of(obj)
		second = all[len(all)-1]
		return len(all)
	}, timeout, interval).Should(Equal(2))
	f.g.Expect(second.Reason).To(Equal(newArtifactReason))
	f.g.Expect(second.Message).To(HaveSuffix(": 1 changed: ConfigMap/app-dev"))
	f.g.Expect(second.Message).NotTo(ContainSubstring("replicas"), "values stay out of events")
	url := second.Metadata[group+diffURLKey]
	f.g.Expect(url).To(ContainSubstring("/kclartifact/" + f.ns + "/changes/diff?from="))
	code, body := fetch(f.g, url)
	f.g.Expect(code).To(Equal(http.StatusOK), body)
	f.g.Expect(body).To(ContainSubstring(`+  replicas: "2"`))
}

// secretUserAndProgram creates Secret db holding user: topsecret-user-42 and returns a program
// of one ConfigMap whose name is the KCL expression given (option("user") reads the Secret's).
func secretUserAndProgram(f *fixture) func(name string) string {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: f.ns}, StringData: map[string]string{"user": "topsecret-user-42"}}
	f.g.Expect(k8sClient.Create(f.ctx, s)).To(Succeed())
	return func(name string) string {
		return "[{apiVersion = \"v1\", kind = \"ConfigMap\", metadata.name = " + name + ", data.v = \"1\"}]\n"
	}
}

// An object a program names after a value it reads from a Secret is masked in the new-artifact
// event's summary, which alerts carry to chats.
func TestNewArtifactSummaryMasksNamesFromSecrets(t *testing.T) {
	f := newFixture(t)
	named := secretUserAndProgram(f)
	f.commit("s1", map[string]string{"main.k": named(`"plain"`)})
	obj := f.waitReady(f.create("named", func(s *kclv1.KCLArtifactSpec) {
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "Secret", Name: "db"}}
	}))
	f.commit("s2", map[string]string{"main.k": named(`option("user")`)})
	f.waitRevision(obj, "s2")
	var last eventv1.Event
	f.g.Eventually(func() int {
		all := eventsReceiver.of(obj)
		last = all[len(all)-1]
		return len(all)
	}, timeout, interval).Should(Equal(2))
	f.g.Expect(last.Message).To(ContainSubstring("ConfigMap/***"))
	f.g.Expect(last.Message).NotTo(ContainSubstring("topsecret-user-42"))
}

// Events never hold a reconcile: while notification-controller does not answer, two spec changes
// are both rendered and served, and their events arrive in order once it answers. With Flux's
// recorder posting inline, each event held the reconcile through its HTTP client's retries
// (about 40 s against a receiver that does not answer) and was then lost.
func TestUnansweredEventsDoNotHoldReconciles(t *testing.T) {
	f := newFixture(t)
	f.commit("h1", map[string]string{"main.k": program})
	release := eventsReceiver.hold(f.ns, "held")
	defer release()
	obj := f.waitReady(f.create("held", nil))
	revisions := []string{obj.Status.Artifact.Revision}
	for _, replicas := range []string{"2", "3"} {
		f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Arguments = map[string]string{"replicas": replicas} })
		obj = f.waitReady(obj)
		revisions = append(revisions, obj.Status.Artifact.Revision)
	}
	f.g.Expect(revisions).To(HaveLen(3))
	f.g.Expect(eventsReceiver.of(obj)).To(BeEmpty(), "the receiver answered a held event")
	f.g.Eventually(func() int { return eventsReceiver.heldPosts(obj) }, timeout, interval).Should(BeNumerically(">", 0))

	release()
	group := kclv1.GroupVersion.Group + "/"
	f.g.Eventually(func() []string {
		var got []string
		for _, e := range eventsReceiver.of(obj) {
			got = append(got, e.Reason+" "+e.Metadata[group+eventv1.MetaRevisionKey])
		}
		return got
	}, timeout, interval).Should(Equal([]string{newArtifactReason + " " + revisions[0],
		newArtifactReason + " " + revisions[1], newArtifactReason + " " + revisions[2]}))
}
