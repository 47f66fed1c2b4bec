package eventqueue

// backlog holds the events waiting to be posted, by object and by namespace, within one bound
// for all. The bound is shared as max-min fairness would share it: while it is not reached a
// namespace takes what it needs; once it is, an event of the namespace holding the most is pushed
// out for the event of a namespace holding fewer (longest queue drop). A namespace's share is so
// the bound divided by the namespaces with events waiting, and one that floods the queue drops
// its own events, never another's. Not safe for concurrent use: the Recorder's lock guards it.
type backlog struct {
	objects    map[string]*objectQueue
	namespaces map[string]*nsBacklog
	queued     int
}

// nsBacklog is one namespace's part: its events waiting and its objects with a queue.
type nsBacklog struct {
	queued  int
	objects map[string]struct{}
}

// objectQueue holds one object's events: a single worker posts them, one after the other.
type objectQueue struct {
	namespace string
	events    []event
	posting   bool
}

func newBacklog() backlog {
	return backlog{objects: map[string]*objectQueue{}, namespaces: map[string]*nsBacklog{}}
}

// add queues e behind the events of object key, of namespace ns.
func (b *backlog) add(key, ns string, e event) {
	n := b.namespaces[ns]
	if n == nil {
		n = &nsBacklog{objects: map[string]struct{}{}}
		b.namespaces[ns] = n
		// the namespace's series exist before its first drop, so that an alert on their
		// increase sees it
		droppedTotal.WithLabelValues(dropQueueFull, ns)
		droppedTotal.WithLabelValues(dropShutdown, ns)
	}
	q := b.objects[key]
	if q == nil {
		q = &objectQueue{namespace: ns}
		b.objects[key] = q
		n.objects[key] = struct{}{}
	}
	q.events = append(q.events, e)
	n.queued++
	b.queued++
}

// first takes the first event of object key, to post it.
func (b *backlog) first(key string) (event, bool) {
	q := b.objects[key]
	if q == nil || len(q.events) == 0 {
		return event{}, false
	}
	e := q.events[0]
	q.events[0] = event{}
	q.events = q.events[1:]
	b.taken(q.namespace)
	return e, true
}

// victim is the object whose newest event gives way to one of namespace ns on a full queue:
// the object with the most events of the namespace with the most, when that namespace is not ns
// and holds at least two more than ns (else the two would only trade places). None: ns is at
// its share and its own event is dropped.
func (b *backlog) victim(ns string) (string, bool) {
	longest, most := "", 0
	for name, n := range b.namespaces {
		if n.queued > most {
			longest, most = name, n.queued
		}
	}
	mine := 0
	if n := b.namespaces[ns]; n != nil {
		mine = n.queued
	}
	if longest == ns || most < mine+2 {
		return "", false
	}
	key, deepest := "", 0
	for k := range b.namespaces[longest].objects {
		if d := len(b.objects[k].events); d > deepest {
			key, deepest = k, d
		}
	}
	return key, key != ""
}

// last takes the newest event of object key: dropping the tail keeps the order of the rest.
func (b *backlog) last(key string) event {
	q := b.objects[key]
	e := q.events[len(q.events)-1]
	q.events = q.events[:len(q.events)-1]
	b.taken(q.namespace)
	return e
}

func (b *backlog) taken(ns string) {
	b.namespaces[ns].queued--
	b.queued--
}

// forget removes object key, which has no event left and none being posted.
func (b *backlog) forget(key string) {
	q := b.objects[key]
	if q == nil {
		return
	}
	delete(b.objects, key)
	n := b.namespaces[q.namespace]
	delete(n.objects, key)
	if len(n.objects) == 0 {
		delete(b.namespaces, q.namespace)
	}
}

// clear drops every waiting event and returns how many each namespace had; objects being posted
// stay until their post ends.
func (b *backlog) clear() map[string]int {
	counts := map[string]int{}
	for key, q := range b.objects {
		if len(q.events) > 0 {
			counts[q.namespace] += len(q.events)
			q.events = nil
		}
		if !q.posting {
			b.forget(key)
		}
	}
	for _, n := range b.namespaces {
		n.queued = 0
	}
	b.queued = 0
	return counts
}
