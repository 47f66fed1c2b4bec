// Package eventqueue takes the post of events to notification-controller off the caller's
// goroutine. Flux's recorder (fluxcd/pkg/runtime/events) records the Kubernetes Event, which
// client-go queues and never waits for, then posts the event to the events address with retries:
// when nothing answers there, the post takes about 15 s (connection refused) to 40 s (no answer),
// and a reconcile that records an event waits as long. Here the Kubernetes Event is still
// recorded at once, by Flux's code, and the post goes through a bounded queue: in order per
// object, dropped and counted when the queue is full.
package eventqueue

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/fluxcd/pkg/runtime/events"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kuberecorder "k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

const (
	// DefaultSize is the most events waiting to be posted, all objects together.
	DefaultSize = 1024
	// DefaultWorkers is the most posts at once: as many objects can wait on a slow receiver
	// before the others wait too.
	DefaultWorkers = 4
	// DefaultDrainTimeout is how long Close keeps posting what is queued.
	DefaultDrainTimeout = 5 * time.Second
)

// Options bound the queue; zero values take the defaults.
type Options struct {
	Size         int
	Workers      int
	DrainTimeout time.Duration
	Log          logr.Logger // where drops are said; Flux's recorder keeps its own log
}

// Recorder is a kuberecorder.EventRecorder that records the Kubernetes Event inline and posts
// to the events address from a queue. Close it after the manager has stopped.
type Recorder struct {
	kube   kuberecorder.EventRecorder // Flux's recorder without its events address
	post   kuberecorder.EventRecorder // Flux's recorder without the Kubernetes Event; nil without an events address
	scheme *runtime.Scheme
	opts   Options

	mu      sync.Mutex
	wake    *sync.Cond
	objects map[string]*objectQueue
	ready   []string // objects with an event waiting and none being posted, oldest first
	queued  int
	closed  bool
	workers sync.WaitGroup
}

// objectQueue holds one object's events: a single worker posts them, one after the other.
type objectQueue struct {
	events  []event
	posting bool
}

// event is what is posted, copied when recorded: the caller goes on changing its object.
type event struct {
	object                 runtime.Object
	annotations            map[string]string
	eventType, reason, msg string
}

var _ kuberecorder.EventRecorder = &Recorder{}

// New splits Flux's recorder into its two halves and starts the workers posting events.
func New(flux *events.Recorder, o Options) *Recorder {
	o = o.withDefaults()
	kube := *flux
	kube.Webhook = "" // Flux records the Kubernetes Event and stops there
	r := &Recorder{kube: &kube, scheme: flux.Scheme, opts: o, objects: map[string]*objectQueue{}}
	r.wake = sync.NewCond(&r.mu)
	if flux.Webhook == "" {
		return r
	}
	post := *flux
	post.EventRecorder = noEvents{} // recorded once, inline
	post.Log = withoutTrace(flux.Log)
	r.post = &post
	for range o.Workers {
		r.workers.Add(1)
		go r.work()
	}
	return r
}

func (o Options) withDefaults() Options {
	if o.Size <= 0 {
		o.Size = DefaultSize
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	return o
}

// Event records an event; see AnnotatedEventf.
func (r *Recorder) Event(object runtime.Object, eventType, reason, message string) {
	r.AnnotatedEventf(object, nil, eventType, reason, "%s", message)
}

// Eventf records an event; see AnnotatedEventf.
func (r *Recorder) Eventf(object runtime.Object, eventType, reason, messageFmt string, args ...any) {
	r.AnnotatedEventf(object, nil, eventType, reason, messageFmt, args...)
}

// AnnotatedEventf records the Kubernetes Event and queues the post; it never waits for the
// events receiver.
func (r *Recorder) AnnotatedEventf(object runtime.Object, annotations map[string]string,
	eventType, reason, messageFmt string, args ...any) {
	r.kube.AnnotatedEventf(object, annotations, eventType, reason, messageFmt, args...)
	// Flux posts no trace events
	if r.post == nil || eventType == eventv1.EventTypeTrace {
		return
	}
	snap, key := r.snapshot(object)
	r.enqueue(key, event{object: snap, annotations: maps.Clone(annotations), eventType: eventType,
		reason: reason, msg: fmt.Sprintf(messageFmt, args...)})
}

// snapshot copies what Flux's recorder reads of the object: its kind, identity and the
// annotations of the event group, which it adds to the event's metadata.
func (r *Recorder) snapshot(object runtime.Object) (runtime.Object, string) {
	m, err := meta.Accessor(object)
	gvk, gvkErr := apiutil.GVKForObject(object, r.scheme)
	if err != nil || gvkErr != nil {
		return object.DeepCopyObject(), fmt.Sprintf("%T", object) // Flux's recorder logs what is wrong
	}
	p := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(),
		UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()}}
	p.SetGroupVersionKind(gvk)
	for k, v := range m.GetAnnotations() {
		if strings.HasPrefix(k, eventv1.Group+"/") {
			metav1.SetMetaDataAnnotation(&p.ObjectMeta, k, v)
		}
	}
	return p, gvk.GroupKind().String() + "/" + m.GetNamespace() + "/" + m.GetName()
}

func (r *Recorder) enqueue(key string, e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		r.dropped(dropShutdown, e)
		return
	case r.queued >= r.opts.Size:
		r.dropped(dropQueueFull, e)
		return
	}
	q := r.objects[key]
	if q == nil {
		q = &objectQueue{}
		r.objects[key] = q
	}
	q.events = append(q.events, e)
	r.queued++
	if len(q.events) == 1 && !q.posting {
		r.ready = append(r.ready, key)
		r.wake.Signal()
	}
}

// dropped counts and says what was not posted: its reason and object, never its message.
func (r *Recorder) dropped(why string, e event) {
	droppedTotal.WithLabelValues(why).Inc()
	m, _ := meta.Accessor(e.object)
	var ns, name string
	if m != nil {
		ns, name = m.GetNamespace(), m.GetName()
	}
	r.opts.Log.Error(errDropped, "event not posted to the events receiver", "why", why, "reason", e.reason,
		"kind", e.object.GetObjectKind().GroupVersionKind().Kind, "namespace", ns, "name", name,
		"queueSize", r.opts.Size)
}

var errDropped = errors.New("event dropped")

// work posts events until Close, taking the object waiting longest and one event of it, so that
// an object whose posts are slow holds one worker, not the others.
func (r *Recorder) work() {
	defer r.workers.Done()
	for {
		key, e, ok := r.next()
		if !ok {
			return
		}
		r.post.AnnotatedEventf(e.object, e.annotations, e.eventType, e.reason, "%s", e.msg)
		r.done(key)
	}
}

func (r *Recorder) next() (string, event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.ready) == 0 && !r.closed {
		r.wake.Wait()
	}
	if len(r.ready) == 0 {
		return "", event{}, false
	}
	key := r.ready[0]
	r.ready = r.ready[1:]
	q := r.objects[key]
	e := q.events[0]
	q.events = q.events[1:]
	q.posting = true
	r.queued--
	return key, e, true
}

// done lets the object's next event be posted, after the objects already waiting.
func (r *Recorder) done(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.objects[key]
	if q == nil { // abandoned by Close
		return
	}
	q.posting = false
	if len(q.events) == 0 {
		delete(r.objects, key)
		return
	}
	r.ready = append(r.ready, key)
	r.wake.Signal()
}

// Close stops taking events and posts those queued for up to the drain timeout; the rest are
// dropped and counted. A post under way is not interrupted (Flux's client takes no context): it
// ends on its own, within its retries.
func (r *Recorder) Close() {
	r.mu.Lock()
	r.closed = true
	r.wake.Broadcast()
	r.mu.Unlock()
	drained := make(chan struct{})
	go func() {
		r.workers.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(r.opts.DrainTimeout):
		r.abandon()
	}
}

// abandon drops what is still queued, so that no worker takes another event.
func (r *Recorder) abandon() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.queued > 0 {
		droppedTotal.WithLabelValues(dropShutdown).Add(float64(r.queued))
		r.opts.Log.Error(errDropped, "events not posted to the events receiver before the drain timeout",
			"count", r.queued, "drainTimeout", r.opts.DrainTimeout.String())
	}
	r.objects, r.ready, r.queued = map[string]*objectQueue{}, nil, 0
}

// noEvents records nothing: the Kubernetes half of Flux's recorder for the posting half.
type noEvents struct{}

func (noEvents) Event(runtime.Object, string, string, string)          {}
func (noEvents) Eventf(runtime.Object, string, string, string, ...any) {}
func (noEvents) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...any) {
}
