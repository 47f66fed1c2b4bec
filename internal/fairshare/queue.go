package fairshare

import (
	"sync"
	"time"
)

// Queue is a work queue (client-go's workqueue.TypedInterface) that hands items out by key in
// turn, and never more than perKey items of one key to the workers at once: a namespace with a
// hundred slow objects holds perKey workers, and every other namespace's next item is handed out
// within one turn of the ring (a turn is a quantum of time, see turns). Within a key, items keep their order. Like client-go's queue, an
// item is queued once however often it is added, and never processed twice at once.
type Queue[T comparable] struct {
	keyOf  func(T) string
	perKey int
	// waited is told how long each item waited, from its first Add to Get.
	waited func(key string, d time.Duration)

	mu         sync.Mutex
	cond       *sync.Cond
	turns      turns[T]
	addedAt    map[T]time.Time
	processing map[T]*hold
	busy       map[string]int
	shutdown   bool

	// lanes is off until WithLanes; cut stops an item's processing.
	lanes lanes
	cut   func(T)
}

// NewQueue returns a Queue whose items belong to keyOf(item). A key's turn lasts quantum (at
// least one item): its items are handed out together, which keeps what serves it warm. waited,
// when not nil, is called with each item's time in the queue.
func NewQueue[T comparable](keyOf func(T) string, perKey int, quantum time.Duration, waited func(key string, d time.Duration)) *Queue[T] {
	q := &Queue[T]{keyOf: keyOf, perKey: max(perKey, 1), waited: waited, turns: newTurns[T](quantum),
		addedAt: map[T]time.Time{}, processing: map[T]*hold{}, busy: map[string]int{}}
	q.lanes = newLanes(0, 0, 0)
	q.cond = sync.NewCond(&q.mu)
	return q
}

// WithLanes gives the queue a fast lane (see lanes): workers is how many call Get, the last free
// one is the fast lane, and cut is called, without the queue's lock, with an item processed in it
// past the slice; it should make the item's processing end soon. Called before the queue is used.
func (q *Queue[T]) WithLanes(workers int, slice, slowFor time.Duration, cut func(T)) *Queue[T] {
	q.lanes, q.cut = newLanes(workers, slice, slowFor), cut
	return q
}

// Add queues item, unless it is queued already; an item being processed is queued again when
// it is done.
func (q *Queue[T]) Add(item T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.shutdown {
		return
	}
	if _, dirty := q.addedAt[item]; dirty {
		return
	}
	q.addedAt[item] = time.Now()
	if _, ok := q.processing[item]; ok {
		return
	}
	q.turns.push(q.keyOf(item), item)
	if cut := q.lanes.wake(q.keyOf(item)); cut != nil {
		go cut() // without the queue's lock
	}
	q.cond.Broadcast()
}

// Len is the number of items waiting.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.turns.len()
}

// Get waits for the next item in turn whose key is under its share; shutdown is true when the
// queue is shut down and nothing is left to hand out.
func (q *Queue[T]) Get() (item T, shutdown bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if item, ok := q.turns.next(q.underShare); ok {
			key := q.keyOf(item)
			h := &hold{key: key}
			if q.cut != nil {
				h.cut = func() { q.cut(item) }
			}
			q.lanes.start(h, len(q.processing), func() { q.sliceOver(h) })
			q.busy[key]++
			q.processing[item] = h
			added := q.addedAt[item]
			delete(q.addedAt, item)
			if q.waited != nil {
				q.waited(key, time.Since(added))
			}
			return item, false
		}
		if q.shutdown && q.turns.len() == 0 {
			return item, true
		}
		q.cond.Wait()
	}
}

// underShare: key is under its share, and the next worker is not the fast lane of a slow key.
func (q *Queue[T]) underShare(key string) bool {
	return q.busy[key] < q.perKey && q.lanes.admits(key, len(q.processing))
}

func (q *Queue[T]) sliceOver(h *hold) {
	q.mu.Lock()
	cut := q.lanes.sliceOver(h, q.turns.len() > q.turns.waiting(h.key))
	q.mu.Unlock()
	if cut != nil {
		cut()
	}
}

// Done ends the processing of item, and queues it again if it was added meanwhile.
func (q *Queue[T]) Done(item T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	h, ok := q.processing[item]
	if !ok {
		return
	}
	q.lanes.end(h)
	delete(q.processing, item)
	key := q.keyOf(item)
	if q.busy[key]--; q.busy[key] <= 0 {
		delete(q.busy, key)
	}
	if _, dirty := q.addedAt[item]; dirty {
		q.turns.push(key, item)
	}
	// A key under its share again, or a drain that may be over.
	q.cond.Broadcast()
}

// ShutDown makes Get return once the items queued are handed out; Add is ignored from now on.
func (q *Queue[T]) ShutDown() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdown = true
	q.cond.Broadcast()
}

// ShutDownWithDrain shuts down and waits until the items being processed are done.
func (q *Queue[T]) ShutDownWithDrain() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shutdown = true
	q.cond.Broadcast()
	for len(q.processing) > 0 {
		q.cond.Wait()
	}
}

// ShuttingDown tells whether ShutDown was called.
func (q *Queue[T]) ShuttingDown() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shutdown
}
