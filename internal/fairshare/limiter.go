// Package fairshare shares a controller's capacity between tenants (namespaces): no key holds
// more than its share, waiting keys are served in turn rather than in arrival order, so a key
// with many waiters delays another by at most one turn, and the last free place is a fast lane
// that a slow key never takes (see lanes). It is what the Kubernetes API server's priority and
// fairness does for requests, reduced to one priority level.
package fairshare

import (
	"context"
	"sync"
	"time"
)

// Limiter bounds how many holders run at once, in all and per key.
type Limiter struct {
	size, perKey int

	mu    sync.Mutex
	total int
	busy  map[string]int
	turns turns[*waiter]
	lanes lanes
}

type waiter struct {
	h       *hold
	ready   chan struct{}
	granted bool
}

// NewLimiter returns a Limiter of size holders at once, at most perKey of them for one key
// (perKey ≤ 0 or above size: size), with the fast lane of DefaultSlice.
func NewLimiter(size, perKey int) *Limiter {
	size = max(size, 1)
	if perKey <= 0 || perKey > size {
		perKey = size
	}
	return &Limiter{size: size, perKey: perKey, busy: map[string]int{}, turns: newTurns[*waiter](0),
		lanes: newLanes(size, DefaultSlice, DefaultSlowFor)}
}

// WithSlice sets the fast lane's slice and how long a key stays slow (slice ≤ 0: no fast
// lane); it is called before the Limiter is used.
func (l *Limiter) WithSlice(slice, slowFor time.Duration) *Limiter {
	l.lanes = newLanes(l.size, slice, slowFor)
	return l
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
// must be called exactly once. A holder that cannot be cut short keeps the fast lane past the
// slice (its key is still slow after it): use AcquireCuttable where the work can stop.
func (l *Limiter) Acquire(ctx context.Context, key string) (release func(), err error) {
	return l.acquire(ctx, &hold{key: key})
}

// AcquireCuttable is Acquire for work that stops when the returned context ends: held in the
// fast lane past the slice, it is cancelled with cause ErrCut.
func (l *Limiter) AcquireCuttable(ctx context.Context, key string) (context.Context, func(), error) {
	hctx, cancel := context.WithCancelCause(ctx)
	release, err := l.acquire(ctx, &hold{key: key, cut: cutter(cancel, l.lanes.slice)})
	if err != nil {
		cancel(err)
		return nil, nil, err
	}
	return hctx, func() { release(); cancel(nil) }, nil
}

func (l *Limiter) acquire(ctx context.Context, h *hold) (release func(), err error) {
	l.mu.Lock()
	if l.free(h.key) {
		l.take(h)
		l.mu.Unlock()
		return l.releaser(h), nil
	}
	w := &waiter{h: h, ready: make(chan struct{})}
	l.turns.push(h.key, w)
	cut := l.lanes.wake(h.key)
	l.mu.Unlock()
	if cut != nil {
		cut()
	}

	select {
	case <-w.ready:
		return l.releaser(h), nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		if w.granted {
			l.give(h)
		} else {
			l.turns.remove(h.key, w)
		}
		return nil, ctx.Err()
	}
}

// TryAcquire takes a place for key only if one is free now and nobody of key waits.
func (l *Limiter) TryAcquire(key string) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.free(key) {
		h := &hold{key: key}
		l.take(h)
		return l.releaser(h), true
	}
	return nil, false
}

// free: a place is free for key now, and none of key's waiters was there first.
func (l *Limiter) free(key string) bool {
	return l.eligible(key) && l.turns.waiting(key) == 0
}

// eligible: a place is free for key: under the size, under its share, and not the fast lane
// for a slow key.
func (l *Limiter) eligible(key string) bool {
	return l.total < l.size && l.busy[key] < l.perKey && l.lanes.admits(key, l.total)
}

func (l *Limiter) releaser(h *hold) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.give(h)
		})
	}
}

func (l *Limiter) take(h *hold) {
	l.lanes.start(h, l.total, func() { l.sliceOver(h) })
	l.total++
	l.busy[h.key]++
}

func (l *Limiter) sliceOver(h *hold) {
	l.mu.Lock()
	cut := l.lanes.sliceOver(h, l.turns.len() > l.turns.waiting(h.key))
	l.mu.Unlock()
	if cut != nil {
		cut()
	}
}

// give returns a place and hands the free places to the waiting keys in turn.
func (l *Limiter) give(h *hold) {
	l.lanes.end(h)
	l.total--
	if l.busy[h.key]--; l.busy[h.key] <= 0 {
		delete(l.busy, h.key)
	}
	for l.total < l.size {
		w, ok := l.turns.next(l.eligible)
		if !ok {
			return
		}
		l.take(w.h)
		w.granted = true
		close(w.ready)
	}
}
