// Package fairshare shares a controller's capacity between tenants (namespaces): no key holds
// more than its share, and waiting keys are served in turn rather than in arrival order, so a key
// with many waiters delays another by at most one turn. It is what the Kubernetes API server's
// priority and fairness does for requests, reduced to one priority level.
package fairshare

import (
	"context"
	"sync"
)

// Limiter bounds how many holders run at once, in all and per key.
type Limiter struct {
	size, perKey int

	mu    sync.Mutex
	total int
	busy  map[string]int
	turns turns[*waiter]
}

type waiter struct {
	key     string
	ready   chan struct{}
	granted bool
}

// NewLimiter returns a Limiter of size holders at once, at most perKey of them for one key
// (perKey ≤ 0 or above size: size).
func NewLimiter(size, perKey int) *Limiter {
	size = max(size, 1)
	if perKey <= 0 || perKey > size {
		perKey = size
	}
	return &Limiter{size: size, perKey: perKey, busy: map[string]int{}, turns: newTurns[*waiter](0)}
}

// Share is a key's share of size places: perKey when set, else half of them (at least one), so
// that one tenant never holds them all.
func Share(size, perKey int) int {
	if perKey > 0 {
		return perKey
	}
	return max(1, size/2)
}

// Acquire waits for a place for key, in its key's turn. The returned release gives it back; it
// must be called exactly once.
func (l *Limiter) Acquire(ctx context.Context, key string) (release func(), err error) {
	l.mu.Lock()
	if l.free(key) {
		l.take(key)
		l.mu.Unlock()
		return l.releaser(key), nil
	}
	w := &waiter{key: key, ready: make(chan struct{})}
	l.turns.push(key, w)
	l.mu.Unlock()

	select {
	case <-w.ready:
		return l.releaser(key), nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		if w.granted {
			l.give(key)
		} else {
			l.turns.remove(key, w)
		}
		return nil, ctx.Err()
	}
}

// TryAcquire takes a place for key only if one is free now and nobody of key waits.
func (l *Limiter) TryAcquire(key string) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.free(key) {
		l.take(key)
		return l.releaser(key), true
	}
	return nil, false
}

// free: a place is free for key now, and none of key's waiters was there first.
func (l *Limiter) free(key string) bool {
	return l.total < l.size && l.busy[key] < l.perKey && l.turns.waiting(key) == 0
}

func (l *Limiter) releaser(key string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.give(key)
		})
	}
}

func (l *Limiter) take(key string) {
	l.total++
	l.busy[key]++
}

// give returns a place and hands the free places to the waiting keys in turn.
func (l *Limiter) give(key string) {
	l.total--
	if l.busy[key]--; l.busy[key] <= 0 {
		delete(l.busy, key)
	}
	for l.total < l.size {
		w, ok := l.turns.next(func(k string) bool { return l.busy[k] < l.perKey })
		if !ok {
			return
		}
		l.take(w.key)
		w.granted = true
		close(w.ready)
	}
}
