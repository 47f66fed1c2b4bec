package fairshare

// turns holds what waits, first-in first-out within a key, and serves the keys round-robin.
type turns[T comparable] struct {
	fifo   map[string][]T
	ring   []string // keys with something waiting, in turn order
	cursor int      // the ring position served next
	n      int
}

func newTurns[T comparable]() turns[T] { return turns[T]{fifo: map[string][]T{}} }

func (t *turns[T]) len() int { return t.n }

func (t *turns[T]) waiting(key string) int { return len(t.fifo[key]) }

// push queues v behind the others of key; a key that had nothing waiting takes the last turn.
func (t *turns[T]) push(key string, v T) {
	if len(t.fifo[key]) == 0 {
		t.ring = append(t.ring, key)
	}
	t.fifo[key] = append(t.fifo[key], v)
	t.n++
}

// remove takes v out of key's queue (a waiter that gave up).
func (t *turns[T]) remove(key string, v T) bool {
	q := t.fifo[key]
	for i, x := range q {
		if x == v {
			t.fifo[key] = append(q[:i:i], q[i+1:]...)
			t.n--
			if len(t.fifo[key]) == 0 {
				t.dropKey(key)
			}
			return true
		}
	}
	return false
}

// next pops the first of the next key in turn that eligible accepts, and moves the turn on.
func (t *turns[T]) next(eligible func(key string) bool) (T, bool) {
	for i := range t.ring {
		idx := (t.cursor + i) % len(t.ring)
		key := t.ring[idx]
		if !eligible(key) {
			continue
		}
		q := t.fifo[key]
		v := q[0]
		t.n--
		if len(q) == 1 {
			delete(t.fifo, key)
			t.ring = append(t.ring[:idx], t.ring[idx+1:]...)
			t.cursor = idx // the next key slid into this position
		} else {
			t.fifo[key] = q[1:]
			t.cursor = idx + 1
		}
		if t.cursor >= len(t.ring) {
			t.cursor = 0
		}
		return v, true
	}
	var zero T
	return zero, false
}

func (t *turns[T]) dropKey(key string) {
	delete(t.fifo, key)
	for i, k := range t.ring {
		if k == key {
			t.ring = append(t.ring[:i], t.ring[i+1:]...)
			if i < t.cursor {
				t.cursor--
			}
			break
		}
	}
	if t.cursor >= len(t.ring) {
		t.cursor = 0
	}
}
