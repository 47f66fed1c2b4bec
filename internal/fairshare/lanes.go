package fairshare

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A share per namespace is not enough on its own: a tenant owns several namespaces, and two of
// them at half a share each hold every place, for as long as their slowest work lasts (a
// render until its timeout, a dependency until its fetch gives up). The places are therefore
// split in two lanes:
//
//   - the last free place is the fast lane. Any namespace may take it, but a holder that keeps
//     it past the slice is cut short (its context is cancelled with ErrCut), and its namespace
//     is slow for slowFor;
//   - the other places are shared as before (turns, a share per namespace), and a holder there
//     runs as long as its own deadline allows. A namespace that held any place past the slice is
//     slow too.
//
// A slow namespace never takes the fast lane, however many namespaces the tenant spreads its
// slow work over: each of them loses at most one slice there, once per slowFor, and another
// namespace's quick work finds a place within a slice. Work that needs longer than the slice
// still runs, in the other places, at full length; it only loses the lane it would block.

// DefaultSlice is how long a holder may keep the fast lane, and how long a hold lasts before
// its namespace counts as slow. A victim's render takes well under a second; a tenant's
// endless render or dripping dependency holds a place for minutes.
const DefaultSlice = 15 * time.Second

// DefaultSlowFor is how long a namespace stays slow after its last hold past the slice: longer
// than the retry interval of a failing object, so an attacker's next attempt is still known.
const DefaultSlowFor = 5 * time.Minute

// ErrCut is the cause of a holder's context cancelled because it kept the fast lane past the
// slice.
var ErrCut = errors.New("cut short by the fair share: it held the last free place, kept for quick work of any namespace, past the slice")

// Cut marks err, the failure of work cut short in the fast lane, as ErrCut's, keeping its
// message and what it wraps: the caller retries it at once in an ordinary place, as no failure.
func Cut(err error) error { return cutError{err} }

type cutError struct{ error }

func (c cutError) Unwrap() []error { return []error{c.error, ErrCut} }

// KeepCut is shown, a message rewritten from err, still marked cut short when err was.
func KeepCut(err, shown error) error {
	if errors.Is(err, ErrCut) {
		return Cut(shown)
	}
	return shown
}

// CutShort tells whether the work of ctx, or the work it waited for (err), was cut short in a
// fast lane.
func CutShort(ctx context.Context, err error) bool {
	return errors.Is(context.Cause(ctx), ErrCut) || errors.Is(err, ErrCut)
}

// slowKeys are the slow keys of every Limiter and Queue of the process: a namespace slow in
// one pool is slow in all. Its reconcile would otherwise take the work queue's fast lane only to
// wait there for a KCL worker whose fast lane it has lost, and hold the lane for a whole slice.
var slowKeys = &slowSet{until: map[string]time.Time{}}

type slowSet struct {
	mu    sync.Mutex
	until map[string]time.Time // a key's slowness ends at this time
}

// lanes is the fast-lane bookkeeping of a Limiter or a Queue, under its owner's lock.
type lanes struct {
	size    int // places in all; fewer than 2: no fast lane
	slice   time.Duration
	slowFor time.Duration
	now     func() time.Time
	slow    *slowSet
	// overdue is the fast-lane hold past its slice that nobody else waited for: it runs on
	// (cutting it would waste its work and idle the place) until another key comes to wait.
	overdue *hold
}

func newLanes(size int, slice, slowFor time.Duration) lanes {
	return lanes{size: size, slice: slice, slowFor: slowFor, now: time.Now, slow: slowKeys}
}

func (l *lanes) on() bool { return l.size >= 2 && l.slice > 0 }

// fast: with total places taken, the next one is the fast lane.
func (l *lanes) fast(total int) bool { return l.on() && total == l.size-1 }

// admits: key may take the next place, total being taken.
func (l *lanes) admits(key string, total int) bool {
	return !l.fast(total) || !l.isSlow(key)
}

func (l *lanes) isSlow(key string) bool {
	l.slow.mu.Lock()
	defer l.slow.mu.Unlock()
	until, ok := l.slow.until[key]
	if ok && !l.now().Before(until) {
		delete(l.slow.until, key)
		return false
	}
	return ok
}

// markSlow makes key slow for slowFor from now, or longer when another pool said so.
func (l *lanes) markSlow(key string) {
	l.slow.mu.Lock()
	defer l.slow.mu.Unlock()
	if until := l.now().Add(l.slowFor); until.After(l.slow.until[key]) {
		l.slow.until[key] = until
	}
}

// hold is one place taken; the timer fires at the end of its slice.
type hold struct {
	key   string
	start time.Time
	fast  bool
	cut   func() // nil: the holder cannot be cut short
	timer *time.Timer
	done  bool
}

// start begins a hold; overSlice runs, without the owner's lock, when the slice is over.
func (l *lanes) start(h *hold, total int, overSlice func()) {
	h.start, h.fast = l.now(), l.fast(total)
	if l.on() {
		h.timer = time.AfterFunc(l.slice, overSlice)
	}
}

// sliceOver marks the hold's key slow and tells whether to cut it: a fast-lane hold still
// held, while another key waits (othersWait); else it is overdue, cut when one comes (wake).
func (l *lanes) sliceOver(h *hold, othersWait bool) (cut func()) {
	if h.done {
		return nil
	}
	l.markSlow(h.key)
	if !h.fast || h.cut == nil {
		return nil
	}
	if !othersWait {
		l.overdue = h
		return nil
	}
	return h.cut
}

// wake is key starting to wait: the overdue fast-lane hold of another key is cut now.
func (l *lanes) wake(key string) (cut func()) {
	h := l.overdue
	if h == nil || h.done || h.key == key {
		return nil
	}
	l.overdue = nil
	return h.cut
}

// end ends a hold; a hold past the slice makes its key slow from now.
func (l *lanes) end(h *hold) {
	h.done = true
	if l.overdue == h {
		l.overdue = nil
	}
	if h.timer != nil {
		h.timer.Stop()
	}
	if l.on() && l.now().Sub(h.start) >= l.slice {
		l.markSlow(h.key)
	}
}

// cutter is a context's cancellation by ErrCut, once.
func cutter(cancel func(error), slice time.Duration) func() {
	var once sync.Once
	return func() { once.Do(func() { cancel(fmt.Errorf("%w (%s)", ErrCut, slice)) }) }
}
