package eventqueue

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/fluxcd/pkg/runtime/events"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
)

// receiver stands for notification-controller: an HTTP server on 127.0.0.1 decoding Flux's
// events. Events of held objects get no answer until released; a held request the client gives
// up on is not recorded (the client posts it again).
type receiver struct {
	*httptest.Server
	mu        sync.Mutex
	got       map[string][]eventv1.Event // by object name, in the order answered
	held      map[string]chan struct{}   // closed on release
	heldNS    map[string]chan struct{}   // every object of a namespace held, closed on release
	arrived   chan string                // the name of each held event's request, as it arrives
	abandoned chan struct{}              // a held request the client gave up on
	hanging   map[string]int             // held requests under way now, by namespace
	mostHung  map[string]int             // the most held requests under way at once, by namespace
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{got: map[string][]eventv1.Event{}, held: map[string]chan struct{}{}, heldNS: map[string]chan struct{}{},
		arrived: make(chan string, 1000), abandoned: make(chan struct{}, 1000),
		hanging: map[string]int{}, mostHung: map[string]int{}}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	// cleanups run last first: everything is released before the server waits for its handlers
	t.Cleanup(r.Close)
	t.Cleanup(r.releaseAll)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	var e eventv1.Event
	if err := json.NewDecoder(req.Body).Decode(&e); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !r.wait(req, e.InvolvedObject) {
		return
	}
	r.mu.Lock()
	r.got[e.InvolvedObject.Name] = append(r.got[e.InvolvedObject.Name], e)
	r.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// wait holds the request of a held object until release (true) or until the client gives up.
func (r *receiver) wait(req *http.Request, obj corev1.ObjectReference) bool {
	r.mu.Lock()
	release := r.held[obj.Name]
	if release == nil {
		release = r.heldNS[obj.Namespace]
	}
	if release != nil {
		r.hanging[obj.Namespace]++
		r.mostHung[obj.Namespace] = max(r.mostHung[obj.Namespace], r.hanging[obj.Namespace])
	}
	r.mu.Unlock()
	if release == nil {
		return true
	}
	defer func() {
		r.mu.Lock()
		r.hanging[obj.Namespace]--
		r.mu.Unlock()
	}()
	select {
	case r.arrived <- obj.Name:
	default: // a test that does not read arrivals
	}
	select {
	case <-release:
		return true
	case <-req.Context().Done():
		select {
		case r.abandoned <- struct{}{}:
		default:
		}
		return false
	}
}

// holdNamespace leaves every event of namespace ns unanswered until releaseNamespace: a
// notification-controller slow for one tenant's Alerts and Providers only.
func (r *receiver) holdNamespace(ns string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heldNS[ns] = make(chan struct{})
}

func (r *receiver) releaseNamespace(ns string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.heldNS[ns]; c != nil {
		close(c)
		delete(r.heldNS, ns)
	}
}

// mostHanging is the most held posts of namespace ns that were under way at once.
func (r *receiver) mostHanging(ns string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mostHung[ns]
}

func (r *receiver) hold(names ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range names {
		r.held[n] = make(chan struct{})
	}
}

func (r *receiver) release(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.held[name]; c != nil {
		close(c)
		delete(r.held, name)
	}
}

func (r *receiver) releaseAll() {
	r.mu.Lock()
	names := make([]string, 0, len(r.held))
	for n := range r.held {
		names = append(names, n)
	}
	r.mu.Unlock()
	for _, n := range names {
		r.release(n)
	}
	r.mu.Lock()
	namespaces := make([]string, 0, len(r.heldNS))
	for ns := range r.heldNS {
		namespaces = append(namespaces, ns)
	}
	r.mu.Unlock()
	for _, ns := range namespaces {
		r.releaseNamespace(ns)
	}
}

// messages are the messages answered for one object, in order.
func (r *receiver) messages(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.got[name] {
		out = append(out, e.Message)
	}
	return out
}

func (r *receiver) events(name string) []eventv1.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]eventv1.Event(nil), r.got[name]...)
}

// fluxRecorder is Flux's recorder as the controller builds it, its Kubernetes Events kept by
// client-go's FakeRecorder for the test to count.
func fluxRecorder(t *testing.T, url string) (*events.Recorder, *record.FakeRecorder) {
	t.Helper()
	kube := record.NewFakeRecorder(10_000)
	// not logr.Discard: Flux's recorder asks its logger's sink whether trace is on
	quiet := funcr.New(func(string, string) {}, funcr.Options{})
	flux, err := events.NewRecorderForScheme(clientgoscheme.Scheme, kube, quiet, url, "test-controller")
	if err != nil {
		t.Fatal(err)
	}
	return flux, kube
}

func configMap(name string) *corev1.ConfigMap {
	return configMapIn("ns", name)
}

func configMapIn(ns, name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + ns + "-" + name)}}
}

// within waits for a channel for at most a minute: a failure, not a hang, when it never comes.
func within[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("no %s within a minute", what)
		var zero T
		return zero
	}
}

// capture is a logger keeping its lines.
type capture struct {
	mu    sync.Mutex
	lines []string
}

func (c *capture) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.lines = append(c.lines, prefix+" "+args)
	}, funcr.Options{})
}

func (c *capture) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}
