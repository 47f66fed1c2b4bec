package fairshare

import (
	"context"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
)

// Budget bounds a quantity that many holders take at once, such as the rendered output the
// controller holds in memory: each bound alone is not enough when several tenants reach theirs
// together. Holders wait first-in first-out, so a large one is not passed over for ever.
type Budget struct {
	size int64
	sem  *semaphore.Weighted
	used atomic.Int64
	peak atomic.Int64
}

// NewBudget returns a budget of size units.
func NewBudget(size int64) *Budget {
	size = max(size, 1)
	return &Budget{size: size, sem: semaphore.NewWeighted(size)}
}

// Size is the whole budget; Used what is taken now.
func (b *Budget) Size() int64 { return b.size }
func (b *Budget) Used() int64 { return b.used.Load() }

// Peak is the most taken at once since the budget was made.
func (b *Budget) Peak() int64 { return b.peak.Load() }

// Hold is one holder's part of a budget, taken in steps and given back at once.
type Hold struct {
	b  *Budget
	mu sync.Mutex
	n  int64
}

// Hold starts a holder with nothing taken.
func (b *Budget) Hold() *Hold { return &Hold{b: b} }

// Take waits until n more units are free and takes them. A holder never takes more than the
// whole budget: one larger than it runs alone.
func (h *Hold) Take(ctx context.Context, n int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	n = min(n, h.b.size-h.n)
	if n <= 0 {
		return nil
	}
	if err := h.b.sem.Acquire(ctx, n); err != nil {
		return err
	}
	h.n += n
	used := h.b.used.Add(n)
	for p := h.b.peak.Load(); used > p && !h.b.peak.CompareAndSwap(p, used); p = h.b.peak.Load() {
	}
	return nil
}

// Release gives back everything taken; the Hold can take again after.
func (h *Hold) Release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n > 0 {
		h.b.sem.Release(h.n)
		h.b.used.Add(-h.n)
		h.n = 0
	}
}
