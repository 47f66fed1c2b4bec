package fairshare

import (
	"slices"
	"time"
)

// turns holds what waits, first-in first-out within a key, and serves the keys in turn.
//
// The key at the head of the ring has the turn: it is served for a quantum of time (at least one
// item), then goes to the back. Handing a key's items out together keeps what serves it warm (a
// KCL worker serves one namespace: a strict item-by-item rotation over more namespaces than
// there are idle workers starts a worker for nearly every render). While the head is at its
// share, its turn is lent to the first key after it that is not, which keeps it as long as it
// is served within its own quantum, then goes to the back too: a key with slow items delays the
// others by its share, never by its backlog.
type turns[T comparable] struct {
	fifo map[string][]T
	ring []string // keys with something waiting; the head has the turn
	n    int

	quantum time.Duration
	now     func() time.Time
	head    turn
	lent    turn // the borrower of the head's turn; key "" for none
}

type turn struct {
	key    string
	until  time.Time
	served bool
}

func newTurns[T comparable](quantum time.Duration) turns[T] {
	return turns[T]{fifo: map[string][]T{}, quantum: quantum, now: time.Now}
}

func (t *turns[T]) len() int { return t.n }

func (t *turns[T]) waiting(key string) int { return len(t.fifo[key]) }

// push queues v behind the others of key; a key that had nothing waiting goes to the back.
func (t *turns[T]) push(key string, v T) {
	if len(t.fifo[key]) == 0 {
		t.ring = append(t.ring, key)
		if len(t.ring) == 1 {
			t.head = t.start(key)
		}
	}
	t.fifo[key] = append(t.fifo[key], v)
	t.n++
}

// remove takes v out of key's queue (a waiter that gave up).
func (t *turns[T]) remove(key string, v T) bool {
	q := t.fifo[key]
	i := slices.Index(q, v)
	if i < 0 {
		return false
	}
	t.fifo[key] = slices.Delete(q, i, i+1)
	t.n--
	if len(t.fifo[key]) == 0 {
		t.drop(key)
	}
	return true
}

// next pops the first item of the key whose turn it is, or of the borrower of that turn, among
// the keys eligible accepts.
func (t *turns[T]) next(eligible func(key string) bool) (T, bool) {
	var zero T
	if len(t.ring) == 0 {
		return zero, false
	}
	now := t.now()
	// a borrower whose loan is over goes to the back before the head's turn passes on: what it
	// was lent does not make it next
	if t.lent.key != "" && t.lent.over(now) {
		t.toBack(t.lent.key)
	}
	if t.head.over(now) && len(t.ring) > 1 {
		t.toBack(t.ring[0])
	}
	if head := t.ring[0]; eligible(head) {
		t.head.served = true
		return t.pop(head), true
	}
	for _, key := range t.ring[1:] {
		if !eligible(key) {
			continue
		}
		if key != t.lent.key {
			t.lent = t.start(key)
		}
		t.lent.served = true
		return t.pop(key), true
	}
	return zero, false
}

func (t *turns[T]) start(key string) turn { return turn{key: key, until: t.now().Add(t.quantum)} }

// over: a turn ends once it served something and its quantum has passed.
func (tn turn) over(now time.Time) bool { return tn.served && !now.Before(tn.until) }

func (t *turns[T]) pop(key string) T {
	q := t.fifo[key]
	v := q[0]
	t.n--
	if len(q) == 1 {
		t.drop(key)
	} else {
		t.fifo[key] = q[1:]
	}
	return v
}

// drop forgets a key with nothing left waiting; its turn, or the one it borrowed, ends.
func (t *turns[T]) drop(key string) {
	delete(t.fifo, key)
	i := slices.Index(t.ring, key)
	if i < 0 {
		return
	}
	t.ring = slices.Delete(t.ring, i, i+1)
	t.afterMove(key, i)
}

// toBack sends key to the back of the ring: its turn is over.
func (t *turns[T]) toBack(key string) {
	i := slices.Index(t.ring, key)
	if i < 0 {
		return
	}
	t.ring = append(slices.Delete(t.ring, i, i+1), key)
	t.afterMove(key, i)
}

// afterMove starts the turn of a new head, and ends the loan of a key that moved.
func (t *turns[T]) afterMove(key string, from int) {
	if t.lent.key == key {
		t.lent = turn{}
	}
	if from == 0 && len(t.ring) > 0 {
		t.head = t.start(t.ring[0])
		if t.lent.key == t.ring[0] {
			t.lent = turn{}
		}
	}
}
