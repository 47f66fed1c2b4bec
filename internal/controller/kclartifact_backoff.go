package controller

import (
	"sync"
	"time"
)

// registryBackoff keeps, per object and kind of exchange (a push, a restore), when a failed
// exchange with a tenant's registry may be tried again, and for which artifact: the wait holds
// across reconciles, whatever woke them (a registry that is down is not asked at every source
// event), and another artifact is tried at once. The first retry comes after retryMin, then
// after as long as it has been failing, up to the ceiling given.
type registryBackoff struct {
	mu sync.Mutex
	m  map[string]backoffState
}

type backoffState struct {
	digest      string
	since, next time.Time
}

const retryMin = 5 * time.Second

// waiting returns when the exchange of key for digest may be tried again, and true while that
// is still to come.
func (b *registryBackoff) waiting(key, digest string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st, ok := b.m[key]
	if !ok || st.digest != digest || !time.Now().Before(st.next) {
		return time.Time{}, false
	}
	return st.next, true
}

// failed records a failure of key for digest and returns when to try again.
func (b *registryBackoff) failed(key, digest string, ceiling time.Duration) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	st, ok := b.m[key]
	if !ok || st.digest != digest {
		st = backoffState{digest: digest, since: now}
	}
	st.next = now.Add(min(max(now.Sub(st.since), retryMin), max(ceiling, retryMin)))
	if b.m == nil {
		b.m = map[string]backoffState{}
	}
	b.m[key] = st
	return st.next
}

// succeeded forgets key's failures.
func (b *registryBackoff) succeeded(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
}
