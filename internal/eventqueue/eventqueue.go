// Package eventqueue takes the post of events to notification-controller off the caller's
// goroutine. Flux's recorder (fluxcd/pkg/runtime/events) records the Kubernetes Event, which
// client-go queues and never waits for, then posts the event to the events address with retries:
// when nothing answers there, the post takes about 15 s (connection refused) to 40 s (no answer),
// and a reconcile that records an event waits as long. Here the Kubernetes Event is still
// recorded at once, by Flux's code, and the post goes through a bounded queue: in order per
// object, shared fairly between namespaces (see backlog.go), dropped and counted when full.
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

	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
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
	Size    int
	Workers int
	// PerNamespace is the most posts at once for one namespace's events; 0: half the workers (at
	// least one), so that a namespace whose posts hang leaves the others workers.
	PerNamespace int
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

	// ready holds the objects with an event to post; it hands them out by namespace in turn, at
	// most PerNamespace at once, and one object to one worker at a time.
	ready *fairshare.Queue[objectKey]

	mu      sync.Mutex
	backlog backlog
	closed  bool
	workers sync.WaitGroup
}

// objectKey names an object's queue and the namespace whose share it takes.
type objectKey struct{ namespace, key string }

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
	r := &Recorder{kube: &kube, scheme: flux.Scheme, opts: o, backlog: newBacklog()}
	if flux.Webhook == "" {
		return r
	}
	post := *flux
	post.EventRecorder = noEvents{} // recorded once, inline
	post.Log = withoutTrace(flux.Log)
	r.post = &post
	r.ready = fairshare.NewQueue(func(k objectKey) string { return k.namespace }, o.PerNamespace, 0, nil)
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
	o.PerNamespace = min(fairshare.Share(o.Workers, o.PerNamespace), o.Workers)
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
func (r *Recorder) snapshot(object runtime.Object) (runtime.Object, objectKey) {
	m, err := meta.Accessor(object)
	gvk, gvkErr := apiutil.GVKForObject(object, r.scheme)
	if err != nil || gvkErr != nil {
		return object.DeepCopyObject(), objectKey{key: fmt.Sprintf("%T", object)} // Flux's recorder logs what is wrong
	}
	p := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: m.GetName(), Namespace: m.GetNamespace(),
		UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()}}
	p.SetGroupVersionKind(gvk)
	for k, v := range m.GetAnnotations() {
		if strings.HasPrefix(k, eventv1.Group+"/") {
			metav1.SetMetaDataAnnotation(&p.ObjectMeta, k, v)
		}
	}
	return p, objectKey{namespace: m.GetNamespace(), key: gvk.GroupKind().String() + "/" + m.GetNamespace() + "/" + m.GetName()}
}

// enqueue queues e behind its object's events. When the queue is full, the namespace holding
// the most events gives its newest up, if that is not e's own: a namespace over its share drops
// its own events, never another's.
func (r *Recorder) enqueue(k objectKey, e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		r.dropped(dropShutdown, k.namespace, e)
		return
	}
	if r.backlog.queued >= r.opts.Size {
		victim, ok := r.backlog.victim(k.namespace)
		if !ok {
			r.dropped(dropQueueFull, k.namespace, e)
			return
		}
		ns := r.backlog.objects[victim].namespace
		r.dropped(dropQueueFull, ns, r.backlog.last(victim))
	}
	r.backlog.add(k.key, k.namespace, e)
	// an object being posted is queued again when its worker is done; one waiting keeps its place
	r.ready.Add(k)
}

// dropped counts and says what was not posted: its reason and object, never its message.
func (r *Recorder) dropped(why, ns string, e event) {
	droppedTotal.WithLabelValues(why, ns).Inc()
	m, _ := meta.Accessor(e.object)
	var name string
	if m != nil {
		name = m.GetName()
	}
	r.opts.Log.Error(errDropped, "event not posted to the events receiver", "why", why, "reason", e.reason,
		"kind", e.object.GetObjectKind().GroupVersionKind().Kind, "namespace", ns, "name", name,
		"queueSize", r.opts.Size)
}

var errDropped = errors.New("event dropped")

// work posts events until Close, taking the object next in turn and one event of it, so that
// an object whose posts are slow holds one worker, and a namespace its share of them.
func (r *Recorder) work() {
	defer r.workers.Done()
	for {
		k, shutdown := r.ready.Get()
		if shutdown {
			return
		}
		if e, ok := r.next(k.key); ok {
			r.post.AnnotatedEventf(e.object, e.annotations, e.eventType, e.reason, "%s", e.msg)
		}
		r.done(k)
	}
}

// next takes the object's first event; none when they were dropped since it was queued.
func (r *Recorder) next(key string) (event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.backlog.first(key)
	if ok {
		r.backlog.objects[key].posting = true
	}
	return e, ok
}

// done lets the object's next event be posted, in its namespace's next turn, behind its
// namespace's other objects.
func (r *Recorder) done(k objectKey) {
	r.mu.Lock()
	if q := r.backlog.objects[k.key]; q != nil {
		q.posting = false
		if len(q.events) > 0 {
			r.ready.Add(k) // being processed: queued again at Done
		} else {
			r.backlog.forget(k.key)
		}
	}
	drained := r.closed && r.backlog.queued == 0
	r.mu.Unlock()
	r.ready.Done(k)
	if drained {
		r.ready.ShutDown()
	}
}

// Close stops taking events and posts those queued for up to the drain timeout; the rest are
// dropped and counted. A post under way is not interrupted (Flux's client takes no context): it
// ends on its own, within its retries.
func (r *Recorder) Close() {
	r.mu.Lock()
	r.closed = true
	empty := r.backlog.queued == 0
	r.mu.Unlock()
	if r.post == nil {
		return
	}
	// the fair queue is shut down once nothing is left to post: a key queued again at Done
	// after its shutdown would be lost
	if empty {
		r.ready.ShutDown()
	}
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
	if n := r.backlog.queued; n > 0 {
		for ns, count := range r.backlog.clear() {
			droppedTotal.WithLabelValues(dropShutdown, ns).Add(float64(count))
		}
		r.opts.Log.Error(errDropped, "events not posted to the events receiver before the drain timeout",
			"count", n, "drainTimeout", r.opts.DrainTimeout.String())
	}
	// the objects still in the fair queue find no event, and their workers end
	r.ready.ShutDown()
}

// noEvents records nothing: the Kubernetes half of Flux's recorder for the posting half.
type noEvents struct{}

func (noEvents) Event(runtime.Object, string, string, string)          {}
func (noEvents) Eventf(runtime.Object, string, string, string, ...any) {}
func (noEvents) AnnotatedEventf(runtime.Object, map[string]string, string, string, string, ...any) {
}
