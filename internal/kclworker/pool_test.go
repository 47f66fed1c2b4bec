package kclworker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
)

func exec(ctx context.Context, p *kclworker.Pool, file string, args ...kcllib.Argument) (*kcllib.ExecProgramResult, error) {
	call := func(m string, b []byte) ([]byte, error) { return p.Call(ctx, m, b) }
	return kcllib.ExecProgram(call, &kcllib.ExecProgramArgs{KFilenameList: []string{file}, Args: args})
}

func mustRender(t *testing.T, p *kclworker.Pool, file, want string) {
	t.Helper()
	res, err := exec(context.Background(), p, file)
	if err != nil {
		t.Fatalf("render after a failure: %v", err)
	}
	if strings.TrimSpace(res.YAMLResult) != want {
		t.Fatalf("got %q, want %q", res.YAMLResult, want)
	}
}

func workerError(t *testing.T, err error, reason kclworker.Reason) *kclworker.WorkerError {
	t.Helper()
	var werr *kclworker.WorkerError
	if !errors.As(err, &werr) {
		t.Fatalf("want a worker error (%s), got %T: %v", reason, err, err)
	}
	if werr.Reason != reason {
		t.Fatalf("want reason %s, got %s: %v", reason, werr.Reason, werr)
	}
	return werr
}

func TestRenderAndEngineErrorKeepWorker(t *testing.T) {
	p := newPool(t, kclworker.Options{Size: 1})
	ok := writeProgram(t, "a = option(\"n\")\n")
	res, err := exec(context.Background(), p, ok, kcllib.Argument{Name: "n", Value: "3"})
	if err != nil || strings.TrimSpace(res.YAMLResult) != "a: 3" {
		t.Fatalf("render: %v %+v", err, res)
	}
	bad := writeProgram(t, "a = 1 +\n")
	_, err = exec(context.Background(), p, bad)
	var eerr *kcllib.EngineError
	if !errors.As(err, &eerr) || !strings.Contains(eerr.Message, "InvalidSyntax") {
		t.Fatalf("want an engine syntax error, got %T %v", err, err)
	}
	mustRender(t, p, ok, "a: null")
	if s := p.Stats(); s.Started != 1 {
		t.Fatalf("a KCL error must not cost the worker: %+v", s)
	}
}

func TestTimeoutKillsWorker(t *testing.T) {
	p := newPool(t, kclworker.Options{Size: 1, Timeout: time.Second})
	// Exponential recursion: seconds of CPU with almost no memory.
	slow := writeProgram(t, "fib = lambda n: int -> int { n if n < 2 else fib(n - 1) + fib(n - 2) }\nx = fib(40)\n")
	start := time.Now()
	_, err := exec(context.Background(), p, slow)
	workerError(t, err, kclworker.ReasonTimeout)
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("the timeout did not stop the render promptly: %s", d)
	}
	mustRender(t, p, writeProgram(t, "b = 2\n"), "b: 2")
	if s := p.Stats(); s.Killed != 1 || s.Started != 2 {
		t.Fatalf("want one killed and a fresh worker: %+v", s)
	}
}

func TestCancelKillsWorker(t *testing.T) {
	p := newPool(t, kclworker.Options{Size: 1})
	slow := writeProgram(t, "fib = lambda n: int -> int { n if n < 2 else fib(n - 1) + fib(n - 2) }\nx = fib(40)\n")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// Cancel once the worker is busy; Started turns 1 when it has been spawned.
		deadline := time.Now().Add(30 * time.Second)
		for p.Stats().Started == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	_, err := exec(ctx, p, slow)
	workerError(t, err, kclworker.ReasonCanceled)
	mustRender(t, p, writeProgram(t, "c = 3\n"), "c: 3")
}

func TestMemoryLimit(t *testing.T) {
	p := newPool(t, kclworker.Options{Size: 1, MemoryLimit: 1 << 30, Timeout: 2 * time.Minute})
	huge := writeProgram(t, "a = [i for i in range(200000000)]\n")
	_, err := exec(context.Background(), p, huge)
	werr := workerError(t, err, kclworker.ReasonMemory)
	if !strings.Contains(werr.Error(), "1.0 GiB") {
		t.Fatalf("the error should name the limit: %v", werr)
	}
	mustRender(t, p, writeProgram(t, "d = 4\n"), "d: 4")
	if s := p.Stats(); s.Crashed != 1 {
		t.Fatalf("want one crashed worker: %+v", s)
	}
}

func TestUnboundedRecursionCrash(t *testing.T) {
	p := newPool(t, kclworker.Options{Size: 1})
	rec := writeProgram(t, "f = lambda n: int -> int { f(n + 1) }\nx = f(0)\n")
	_, err := exec(context.Background(), p, rec)
	werr := workerError(t, err, kclworker.ReasonCrash)
	if !strings.Contains(werr.Detail, "recursion") {
		t.Fatalf("the error should point at recursion: %v", werr)
	}
	mustRender(t, p, writeProgram(t, "e = 5\n"), "e: 5")
}

func TestWorkerKilledBetweenCallsIsReplaced(t *testing.T) {
	p := newPool(t, kclworker.Options{Size: 1})
	f := writeProgram(t, "g = 6\n")
	mustRender(t, p, f, "g: 6")
	pids := p.IdlePIDs("")
	if len(pids) != 1 {
		t.Fatalf("want the worker idle after a render, got %v", pids)
	}
	for _, pid := range pids {
		killPID(t, pid)
	}
	mustRender(t, p, f, "g: 6")
	if s := p.Stats(); s.Started != 2 {
		t.Fatalf("want a replacement worker: %+v", s)
	}
}

func TestRecycleAfterMaxCalls(t *testing.T) {
	p := newPool(t, kclworker.Options{Size: 1, MaxCalls: 3})
	f := writeProgram(t, "h = 7\n")
	for range 7 {
		mustRender(t, p, f, "h: 7")
	}
	if s := p.Stats(); s.Started != 3 || s.Recycled != 2 {
		t.Fatalf("7 calls with MaxCalls=3 need 3 workers, 2 recycled: %+v", s)
	}
}

func TestRecycleOnMemoryGrowth(t *testing.T) {
	p := newPool(t, kclworker.Options{Size: 1, MaxRSS: 1})
	f := writeProgram(t, "i = 8\n")
	for range 3 {
		mustRender(t, p, f, "i: 8")
	}
	if s := p.Stats(); s.Started != 3 || s.Recycled != 3 {
		t.Fatalf("every worker is over a 1-byte RSS ceiling and must be recycled: %+v", s)
	}
}

func TestConcurrentRendersBoundedByPoolSize(t *testing.T) {
	p := newPool(t, kclworker.Options{Size: 2, PerDomain: 2})
	f := writeProgram(t, "v = option(\"v\")\n")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := exec(context.Background(), p, f, kcllib.Argument{Name: "v", Value: fmt.Sprint(i)})
			if err != nil {
				errs <- err
				return
			}
			if want := fmt.Sprintf("v: %d", i); strings.TrimSpace(res.YAMLResult) != want {
				errs <- fmt.Errorf("render %d got %q", i, res.YAMLResult)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := p.Stats(); s.Started != 2 {
		t.Fatalf("16 concurrent renders on a pool of 2 must use exactly 2 workers: %+v", s)
	}
}

// A namespace whose programs run until they are stopped holds its share of the workers, not all
// of them: another namespace's render goes through meanwhile.
func TestDomainHoldsOnlyItsShareOfWorkers(t *testing.T) {
	var mu sync.Mutex
	got := map[string]int{}
	p := newPool(t, kclworker.Options{Size: 2, Timeout: time.Minute, Waited: func(d string, _ time.Duration) {
		mu.Lock()
		got[d]++
		mu.Unlock()
	}})
	slow := writeProgram(t, "fib = lambda n: int -> int { n if n < 2 else fib(n - 1) + fib(n - 2) }\nx = fib(60)\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	noisy := p.Session(kclworker.Domain{Name: "noisy"}, "")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			call := func(m string, b []byte) ([]byte, error) { return noisy.Call(ctx, m, b) }
			_, _ = kcllib.ExecProgram(call, &kcllib.ExecProgramArgs{KFilenameList: []string{slow}})
		})
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := got["noisy"]
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no noisy render started")
		}
	}
	victim := p.Session(kclworker.Domain{Name: "victim"}, "")
	vctx, vcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer vcancel()
	call := func(m string, b []byte) ([]byte, error) { return victim.Call(vctx, m, b) }
	ok := writeProgram(t, "b = 2\n")
	// Without shares the four endless renders hold both workers and this waits until its
	// deadline.
	res, err := kcllib.ExecProgram(call, &kcllib.ExecProgramArgs{KFilenameList: []string{ok}})
	if err != nil || strings.TrimSpace(res.YAMLResult) != "b: 2" {
		t.Fatalf("the victim's render: %v %+v", err, res)
	}
	cancel()
	wg.Wait()
	if s := p.Stats(); s.Killed == 0 {
		t.Fatalf("the noisy renders were not running: %+v", s)
	}
}

// TestIdleWorkersKeepWithinTheirMemory: an idle worker keeps what its last render allocated, so
// idle workers of many domains are bounded together (MaxIdleMemory), the least recently used
// going first, and one that alone keeps more is not kept at all.
func TestIdleWorkersKeepWithinTheirMemory(t *testing.T) {
	p := newPool(t, kclworker.Options{Size: 1, MaxIdleMemory: 150 << 20})
	// about 80 bytes an item stay in the worker after the render (measured): ~100 MB
	filler := writeProgram(t, "_n = len([i for i in range(1200000)])\nn = _n\n")
	render := func(domain, file string) {
		t.Helper()
		s := p.Session(kclworker.Domain{Name: domain}, "")
		call := func(m string, b []byte) ([]byte, error) { return s.Call(context.Background(), m, b) }
		if _, err := kcllib.ExecProgram(call, &kcllib.ExecProgramArgs{KFilenameList: []string{file}}); err != nil {
			t.Fatalf("render in %s: %v", domain, err)
		}
	}
	render("a", filler)
	if len(p.IdlePIDs("a")) != 1 {
		t.Fatalf("a worker within the bound is kept idle: %+v", p.Stats())
	}
	render("b", filler)
	if len(p.IdlePIDs("a")) != 0 || len(p.IdlePIDs("b")) != 1 || p.Stats().Evicted != 1 {
		t.Fatalf("two idle workers over the bound together: the older must go (a %v, b %v): %+v",
			p.IdlePIDs("a"), p.IdlePIDs("b"), p.Stats())
	}
	render("c", writeProgram(t, "_n = len([i for i in range(3000000)])\nn = _n\n"))
	if len(p.IdlePIDs("c")) != 0 || p.Stats().Recycled != 1 {
		t.Fatalf("a worker over the bound alone is not kept: %+v", p.Stats())
	}
	if len(p.IdlePIDs("b")) != 1 {
		t.Fatalf("recycling c must not evict b: %+v", p.Stats())
	}
}
