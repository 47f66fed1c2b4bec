package fairshare

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// acquireAsync starts an Acquire and reports, in order, which key got its place.
func acquireAsync(t *testing.T, l *Limiter, key string, got chan<- string, releases chan<- func()) {
	t.Helper()
	go func() {
		release, err := l.Acquire(context.Background(), key)
		if err != nil {
			t.Error(err)
			return
		}
		releases <- release
		got <- key
	}()
}

// waitQueued waits until n acquirers of key are queued.
func waitQueued(t *testing.T, l *Limiter, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		w := l.turns.waiting(key)
		l.mu.Unlock()
		if w >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d acquirers of %s queued, want %d", w, key, n)
		}
		time.Sleep(time.Millisecond) // polling the limiter's state, not timing it
	}
}

func TestLimiterServesKeysInTurnNotInArrivalOrder(t *testing.T) {
	l := NewLimiter(1, 1)
	first, ok := l.TryAcquire("noisy")
	if !ok {
		t.Fatal("an empty limiter refused")
	}
	got, releases := make(chan string, 20), make(chan func(), 20)
	for range 10 {
		acquireAsync(t, l, "noisy", got, releases)
	}
	waitQueued(t, l, "noisy", 10)
	acquireAsync(t, l, "victim", got, releases)
	waitQueued(t, l, "victim", 1)

	first()
	if k := <-got; k != "noisy" {
		t.Fatalf("first turn went to %s", k)
	}
	(<-releases)()
	// Ten of noisy arrived first; the victim waits one turn, not ten.
	if k := <-got; k != "victim" {
		t.Fatalf("second turn went to %s, want the victim", k)
	}
}

func TestLimiterHoldsEachKeyToItsShare(t *testing.T) {
	l := NewLimiter(4, 2)
	var held []func()
	for range 2 {
		r, ok := l.TryAcquire("noisy")
		if !ok {
			t.Fatal("refused under the share")
		}
		held = append(held, r)
	}
	if _, ok := l.TryAcquire("noisy"); ok {
		t.Fatal("a key got a third place with a share of two")
	}
	for _, k := range []string{"a", "b"} {
		if _, ok := l.TryAcquire(k); !ok {
			t.Fatalf("%s refused while two places are free", k)
		}
	}
	if _, ok := l.TryAcquire("c"); ok {
		t.Fatal("a fifth place in a limiter of four")
	}
	held[0]()
	held[0]() // a second release is a no-op
	if r, ok := l.TryAcquire("c"); !ok {
		t.Fatal("a released place was not given")
	} else {
		r()
	}
}

func TestLimiterCancelledWaiterLeavesNoHole(t *testing.T) {
	l := NewLimiter(1, 1)
	release, _ := l.TryAcquire("a")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := l.Acquire(ctx, "b")
		errc <- err
	}()
	waitQueued(t, l, "b", 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire returned %v", err)
	}
	release()
	if r, ok := l.TryAcquire("c"); !ok {
		t.Fatal("the cancelled waiter kept the place")
	} else {
		r()
	}
}

func TestLimiterUnderLoadNeverExceedsItsBounds(t *testing.T) {
	l := NewLimiter(3, 1)
	var mu sync.Mutex
	total, perKey, worst := 0, map[string]int{}, 0
	var wg sync.WaitGroup
	for i := range 60 {
		key := fmt.Sprintf("ns%d", i%5)
		wg.Go(func() {
			release, err := l.Acquire(context.Background(), key)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			total++
			perKey[key]++
			worst = max(worst, total)
			if perKey[key] > 1 {
				t.Errorf("%s holds %d places, share 1", key, perKey[key])
			}
			mu.Unlock()
			time.Sleep(100 * time.Microsecond) // hold the place while others contend
			mu.Lock()
			total--
			perKey[key]--
			mu.Unlock()
			release()
		})
	}
	wg.Wait()
	if worst > 3 {
		t.Fatalf("%d held at once in a limiter of 3", worst)
	}
}

func nsOf(s string) string { ns, _, _ := strings.Cut(s, "/"); return ns }

func TestQueueHandsOutInTurnAndWithinShare(t *testing.T) {
	q := NewQueue(nsOf, 2, 0, nil)
	for i := range 6 {
		q.Add(fmt.Sprintf("noisy/%d", i))
	}
	q.Add("victim/a")
	q.Add("other/b")
	var got []string
	for range 4 {
		it, _ := q.Get()
		got = append(got, it)
	}
	want := []string{"noisy/0", "victim/a", "other/b", "noisy/1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("handed out %v, want %v", got, want)
	}
	// noisy holds its two: nothing of it is handed out until one is done.
	q.Add("late/c")
	if it, _ := q.Get(); it != "late/c" {
		t.Fatalf("handed out %s while noisy is at its share", it)
	}
	q.Done("noisy/0")
	if it, _ := q.Get(); it != "noisy/2" {
		t.Fatalf("after a done, handed out %s, want noisy/2", it)
	}
}

func TestQueueAddWhileProcessingQueuesOnceAfterDone(t *testing.T) {
	waits := map[string]int{}
	q := NewQueue(nsOf, 1, 0, func(key string, _ time.Duration) { waits[key]++ })
	q.Add("a/x")
	q.Add("a/x")
	if q.Len() != 1 {
		t.Fatalf("an item added twice is queued %d times", q.Len())
	}
	it, _ := q.Get()
	q.Add("a/x")
	q.Add("a/x")
	if q.Len() != 0 {
		t.Fatal("an item being processed was queued beside itself")
	}
	q.Done(it)
	if q.Len() != 1 {
		t.Fatalf("an item added during processing is queued %d times after done", q.Len())
	}
	q.Get()
	if waits["a"] != 2 {
		t.Fatalf("queue waits observed %d times, want 2", waits["a"])
	}
}

func TestQueueShutDownDrains(t *testing.T) {
	q := NewQueue(nsOf, 1, 0, nil)
	q.Add("a/x")
	it, _ := q.Get()
	done := make(chan struct{})
	go func() { q.ShutDownWithDrain(); close(done) }()
	select {
	case <-done:
		t.Fatal("drain returned while an item is processing")
	case <-time.After(50 * time.Millisecond): // checking it did not return, not timing it
	}
	q.Done(it)
	<-done
	if _, shutdown := q.Get(); !shutdown {
		t.Fatal("Get after shutdown did not say so")
	}
	q.Add("a/y")
	if q.Len() != 0 {
		t.Fatal("Add after shutdown queued")
	}
}

func TestBudgetBoundsTheSumOfItsHolders(t *testing.T) {
	b := NewBudget(100)
	a, c := b.Hold(), b.Hold()
	if err := a.Take(context.Background(), 70); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := c.Take(ctx, 40); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("took 40 beside 70 of 100: %v", err)
	}
	got := make(chan error)
	go func() { got <- c.Take(context.Background(), 40) }()
	a.Release()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if b.Used() != 40 {
		t.Fatalf("used %d, want 40", b.Used())
	}
	// one larger than the whole budget runs alone instead of never
	big := b.Hold()
	go func() { got <- big.Take(context.Background(), 500) }()
	c.Release()
	if err := <-got; err != nil || b.Used() != 100 {
		t.Fatalf("a holder larger than the budget: %v, used %d", err, b.Used())
	}
	big.Release()
	big.Release()
	if b.Used() != 0 {
		t.Fatalf("used %d after every release", b.Used())
	}
}

// frozen is a clock a test moves by hand.
type frozen struct{ t time.Time }

func (c *frozen) now() time.Time { return c.t }

func getN(q *Queue[string], n int) []string {
	var got []string
	for range n {
		it, _ := q.Get()
		got = append(got, it)
	}
	return got
}

// A namespace's requests queued together are handed out together within its quantum: a strict
// rotation would move to another namespace, and another KCL worker, at every request.
func TestQueueQuantumKeepsAKeysItemsTogether(t *testing.T) {
	clock := &frozen{t: time.Unix(0, 0)}
	q := NewQueue(nsOf, 10, time.Second, nil)
	q.turns.now = clock.now
	for i := range 4 {
		q.Add(fmt.Sprintf("a/%d", i))
		q.Add(fmt.Sprintf("b/%d", i))
	}
	if got := getN(q, 3); fmt.Sprint(got) != "[a/0 a/1 a/2]" {
		t.Fatalf("within a's quantum: %v", got)
	}
	clock.t = clock.t.Add(time.Second)
	if got := getN(q, 5); fmt.Sprint(got) != "[b/0 b/1 b/2 b/3 a/3]" {
		t.Fatalf("after a's quantum: %v", got)
	}
}

// While the namespace whose turn it is holds its share, the turn is lent in ring order: a
// borrower keeps it within its own quantum, then the next one gets it; one-request namespaces
// are served one after the other.
func TestQueueLendsTheTurnOfAKeyAtItsShare(t *testing.T) {
	clock := &frozen{t: time.Unix(0, 0)}
	q := NewQueue(nsOf, 1, time.Second, nil)
	q.turns.now = clock.now
	for i := range 5 {
		q.Add(fmt.Sprintf("noisy/%d", i))
	}
	for i := range 3 {
		q.Add(fmt.Sprintf("big/%d", i))
	}
	q.Add("v1/x")
	q.Add("v2/x")
	if got := getN(q, 2); fmt.Sprint(got) != "[noisy/0 big/0]" {
		t.Fatalf("first hand-outs: %v", got)
	}
	q.Done("big/0")
	if got := getN(q, 1); fmt.Sprint(got) != "[big/1]" {
		t.Fatalf("the borrower within its quantum: %v", got)
	}
	clock.t = clock.t.Add(time.Second)
	q.Done("big/1")
	// noisy's and big's quanta are over: noisy is still at its share, big goes to the back
	if got := getN(q, 3); fmt.Sprint(got) != "[v1/x v2/x big/2]" {
		t.Fatalf("after the quanta: %v", got)
	}
	q.Done("noisy/0")
	if it, _ := q.Get(); it != "noisy/1" {
		t.Fatalf("noisy after its share freed: %s", it)
	}
}
