package fairshare

import (
	"context"
	"errors"
	"testing"
	"time"
)

const testSlice = 50 * time.Millisecond

// Two namespaces of one tenant at a share each held both places of a limiter of two for as
// long as their work lasted: the holder of the last place is cut after the slice, its
// namespace is slow, and the last place goes to another namespace, not back to either.
func TestLimiterCutsTheFastLaneAndKeepsItFromSlowKeys(t *testing.T) {
	l := NewLimiter(2, 1).WithSlice(testSlice, time.Hour)
	ctxA, releaseA, err := l.AcquireCuttable(context.Background(), "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	defer releaseA()
	ctxB, releaseB, err := l.AcquireCuttable(context.Background(), "tenant-b")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	go func() {
		_, release, err := l.AcquireCuttable(context.Background(), "lim-victim")
		if err == nil {
			got <- "lim-victim"
			release()
		}
	}()
	waitQueued(t, l, "lim-victim", 1)

	select {
	case <-ctxB.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder of the last place was not cut after its slice")
	}
	if cause := context.Cause(ctxB); !errors.Is(cause, ErrCut) {
		t.Fatalf("cut with cause %v", cause)
	}
	if ctxA.Err() != nil {
		t.Fatal("the holder of the other place was cut: it runs to its own deadline")
	}
	releaseB()
	if k := <-got; k != "lim-victim" {
		t.Fatalf("the last place went to %s, a namespace cut from it", k)
	}
	if _, ok := l.TryAcquire("tenant-a"); ok {
		t.Fatal("tenant-a, whose hold outlasted the slice, took the last place")
	}
}

func TestLimiterLetsQuickWorkKeepTheFastLane(t *testing.T) {
	l := NewLimiter(2, 1).WithSlice(time.Hour, time.Hour)
	_, releaseA, _ := l.AcquireCuttable(context.Background(), "a")
	defer releaseA()
	ctx, release, err := l.AcquireCuttable(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	release()
	if context.Cause(ctx) == nil || errors.Is(context.Cause(ctx), ErrCut) {
		t.Fatalf("a released hold's context: cause %v, want a plain cancel", context.Cause(ctx))
	}
	if r, ok := l.TryAcquire("b"); !ok {
		t.Fatal("a quick holder of the last place lost it")
	} else {
		r()
	}
}

// The same for the work queue: the item processed by the last worker past the slice is cut,
// and the next item handed to that worker is another namespace's, not the slow one's.
func TestQueueCutsTheFastLaneAndKeepsItFromSlowKeys(t *testing.T) {
	cuts := make(chan string, 4)
	q := NewQueue(nsOf, 1, 0, nil).WithLanes(2, testSlice, time.Hour, func(item string) { cuts <- item })
	q.Add("q-tenant-a/0")
	q.Add("q-tenant-b/0")
	if got := getN(q, 2); got[0] != "q-tenant-a/0" || got[1] != "q-tenant-b/0" {
		t.Fatalf("handed out %v", got)
	}
	q.Add("q-victim/0")
	select {
	case item := <-cuts:
		if item != "q-tenant-b/0" {
			t.Fatalf("cut %s, want the last worker's item", item)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the last worker's item was not cut after its slice")
	}
	q.Done("q-tenant-b/0")
	if it, _ := q.Get(); it != "q-victim/0" {
		t.Fatalf("the last worker got %s, want the victim's", it)
	}
	q.Done("q-victim/0")
	// q-tenant-a's slice is over too (it is slow now), and it was not cut: it holds a place of
	// its own share, not the last one
	deadline := time.Now().Add(5 * time.Second)
	for {
		q.mu.Lock()
		slow := q.lanes.isSlow("q-tenant-a")
		q.mu.Unlock()
		if slow {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("q-tenant-a's hold outlasted the slice and was not marked slow")
		}
		time.Sleep(time.Millisecond) // polling the queue's state, not timing it
	}
	select {
	case item := <-cuts:
		t.Fatalf("%s was cut: only the last worker's item is", item)
	default:
	}
}

// Work past the slice in the fast lane is not cut while nobody else waits (cutting it would
// only waste it and idle the place) nor for more work of its own key; it is cut as soon as
// another key comes to wait.
func TestAnOverdueFastLaneIsCutOnlyWhenAnotherKeyWaits(t *testing.T) {
	l := NewLimiter(2, 2).WithSlice(testSlice, time.Hour)
	_, releaseA, err := l.AcquireCuttable(context.Background(), "own")
	if err != nil {
		t.Fatal(err)
	}
	defer releaseA()
	ctx, release, err := l.AcquireCuttable(context.Background(), "own")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	go func() {
		if _, r, err := l.AcquireCuttable(context.Background(), "own"); err == nil {
			r()
		}
	}()
	waitQueued(t, l, "own", 1)
	deadline := time.Now().Add(5 * time.Second)
	for !l.lanes.isSlow("own") {
		if time.Now().After(deadline) {
			t.Fatal("the hold past its slice did not make its key slow")
		}
		time.Sleep(time.Millisecond) // polling the limiter's state, not timing it
	}
	if ctx.Err() != nil {
		t.Fatalf("cut with only its own key waiting: %v", context.Cause(ctx))
	}
	go func() {
		if _, r, err := l.AcquireCuttable(context.Background(), "other"); err == nil {
			r()
		}
	}()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the overdue fast lane was not cut when another key came to wait")
	}
	if !errors.Is(context.Cause(ctx), ErrCut) {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
}

// A message rewritten from a cut failure stays cut, and a cut shows whether it came through the
// context's cause or the error waited for.
func TestCutSurvivesARewrittenMessage(t *testing.T) {
	cut := Cut(errors.New("render failed"))
	if shown := KeepCut(cut, errors.New("the render failed")); !errors.Is(shown, ErrCut) || shown.Error() != "the render failed" {
		t.Errorf("rewritten cut: %v (cut %v)", shown, errors.Is(shown, ErrCut))
	}
	if shown := KeepCut(errors.New("x"), errors.New("y")); errors.Is(shown, ErrCut) {
		t.Error("an ordinary failure became cut")
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	if CutShort(ctx, nil) || CutShort(ctx, errors.New("x")) {
		t.Error("cut short without a cut")
	}
	if !CutShort(ctx, cut) {
		t.Error("the error waited for was cut, not seen")
	}
	cancel(ErrCut)
	if !CutShort(ctx, nil) {
		t.Error("the context's cause was a cut, not seen")
	}
}
