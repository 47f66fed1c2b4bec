package kclworker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
)

// Options configure a Pool. Zero values take the defaults below.
type Options struct {
	// Size bounds how many renders run at once, in all domains together; PerDomain those of one
	// domain (default half of Size, at least one), so that a tenant whose programs run until the
	// timeout holds at most its share. Waiting domains are served in turn.
	Size, PerDomain int
	// MaxIdle bounds the idle workers kept warm, in all domains together; the least recently
	// used one goes first.
	MaxIdle int
	// MaxIdleMemory bounds the private resident memory of the idle workers, all domains
	// together, in bytes; the least recently used go first. An idle worker keeps what its last
	// render allocated (the engine does not give memory back), so without this bound idle
	// workers of many namespaces add up past any Pod limit. It is their share of the Pod's
	// memory beside the busy workers' MemoryLimit each.
	MaxIdleMemory uint64
	// IdleTimeout stops a worker that has not been used for this long.
	IdleTimeout time.Duration
	// Sandbox requires every domain to have a Root, and confines its workers to it.
	Sandbox bool
	// LibPath is the engine library handed to workers; empty lets them search (kcllib.Find).
	LibPath string
	// Timeout applies to a call whose context has no earlier deadline.
	Timeout time.Duration
	// MemoryLimit bounds each worker's data (heap and anonymous mappings), in bytes.
	MemoryLimit uint64
	// MaxOutput bounds a rendered output in bytes; the controller never holds a larger answer.
	MaxOutput uint64
	// MaxCalls recycles a worker after this many calls: the engine never frees its results.
	MaxCalls int
	// MaxRSS recycles a worker whose resident memory grew past this many bytes.
	MaxRSS uint64
	// Waited, when set, is told how long each call of a domain waited for a place.
	Waited func(domain string, d time.Duration)
	// Command starts a worker; it defaults to DefaultCommand: the kcl-worker binary beside this
	// executable, else this executable with Subcommand.
	Command []string

	// noSeccomp leaves the seccomp filter out, for the test that shows what it prevents.
	noSeccomp bool
}

// Defaults for Options.
const (
	DefaultSize = 2
	// DefaultMaxIdle keeps a warm worker for each of 128 busy namespaces: a cold confined start
	// costs about ten warm renders (make bench), and with fewer idle workers than namespaces
	// every render started one (make bench-scale: 900 starts for 1,000 renders over 10
	// namespaces with 4, 11 with 10; 313 starts for 10,000 over 100 namespaces with 16). What
	// they keep is bounded by DefaultMaxIdleMemory, not by their count.
	DefaultMaxIdle     = 128
	DefaultIdleTimeout = 5 * time.Minute
	DefaultTimeout     = 2 * time.Minute
	DefaultMemoryLimit = 2 << 30
	DefaultMaxCalls    = 500
	DefaultMaxRSS      = 768 << 20
	// DefaultMaxIdleMemory holds DefaultMaxIdle warm workers of the kcl-worker binary at 4 MiB
	// each, or 100 at 5 MiB. It counts a worker's RssAnon (statm's resident less its file and
	// shared pages: the binary's and the engine library's pages are shared by every worker and
	// with the page cache). Measured (BenchmarkWarmWorkerMemory and the scale harness's program,
	// confined, make build's binaries): a kcl-worker keeps 2.1 MiB after one render, 2.8 MiB
	// after 100 renders of the scale harness's program, 3.4 MiB after 200, and 12.4 MiB after
	// 200 larger, different programs; in make bench-scale at 10,000 over 100 namespaces the 100
	// idle workers kept 321 MiB together after 100 renders each and reached 384 MiB (then the
	// bound) after 200. A worker of the controller binary keeps about 7 MiB more (9.4-10.1 MiB
	// for the harness's program), so only about 50 of those fit. A hostile program can make one
	// worker keep up to this bound (a worker over it alone is not kept), and the least recently
	// used go first, so the bound holds whatever the programs: the Pod's memory limit must hold
	// it (docs/security.md#sizing).
	DefaultMaxIdleMemory = 512 << 20
	DefaultMaxOutput     = 64 << 20
)

func (o Options) withDefaults() (Options, error) {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Size, DefaultSize)
	def(&o.MaxIdle, DefaultMaxIdle)
	def(&o.MaxCalls, DefaultMaxCalls)
	o.PerDomain = fairshare.Share(o.Size, o.PerDomain)
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MemoryLimit == 0 {
		o.MemoryLimit = DefaultMemoryLimit
	}
	if o.MaxRSS == 0 {
		o.MaxRSS = DefaultMaxRSS
	}
	if o.MaxIdleMemory == 0 {
		o.MaxIdleMemory = DefaultMaxIdleMemory
	}
	if o.MaxOutput == 0 {
		o.MaxOutput = DefaultMaxOutput
	}
	if len(o.Command) == 0 {
		cmd, err := DefaultCommand()
		if err != nil {
			return o, err
		}
		o.Command = cmd
	}
	return o, nil
}

// WorkerBinary is the file name of the worker alone (cmd/kcl-worker), installed beside the
// controller binary by `make build` and in the image.
const WorkerBinary = "kcl-worker"

// DefaultCommand is how a pool starts a worker when Options.Command is empty: the kcl-worker
// binary beside this executable (symbolic links resolved, as for the engine library) when there
// is one, else this executable with Subcommand (a single-binary install, and test binaries whose
// TestMain calls ServeIfWorker). A warm worker of the small binary keeps a fraction of the
// memory of a copy of the whole controller, and starts faster (docs/benchmarks.md).
func DefaultCommand() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locating this executable to start KCL workers: %w", err)
	}
	return CommandBeside(exe), nil
}

// CommandBeside is DefaultCommand for the executable exe.
func CommandBeside(exe string) []string {
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	sibling := filepath.Join(filepath.Dir(exe), WorkerBinary)
	if sibling != exe {
		if st, err := os.Stat(sibling); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return []string{sibling, Subcommand}
		}
	}
	return []string{exe, Subcommand}
}

// Domain is a trust domain: the workers that render for it never render for another. The
// controller uses one per namespace, Flux's tenant boundary.
type Domain struct {
	Name string
	// Roots are the only trees a confined worker may read (read-only): for the controller, the
	// namespace's staging root.
	Roots []string
}

func (d Domain) same(o Domain) bool {
	return d.Name == o.Name && strings.Join(d.Roots, "\x00") == strings.Join(o.Roots, "\x00")
}

// Stats counts worker lifecycle events since the pool was created.
type Stats struct {
	Started    int64 // worker processes started
	Recycled   int64 // retired after MaxCalls or MaxRSS
	Evicted    int64 // idle workers stopped to make room (MaxIdle, MaxIdleMemory) or after IdleTimeout
	Killed     int64 // killed on timeout or cancellation
	Crashed    int64 // died on their own (signal, abort, memory limit)
	Violations int64 // killed for breaking the protocol
	// ColdStarts counts calls that found no idle worker of their domain and waited for one to
	// start (for a sandboxed pool: the confinement and re-execution included).
	ColdStarts int64
}

// Pool hands calls to worker processes, at most Size at once.
type Pool struct {
	opts   Options
	slots  *fairshare.Limiter
	stopGC chan struct{}

	mu    sync.Mutex
	idle  map[string][]*worker // by domain name
	nIdle int
	// idleMem adds up the private memory of the idle workers, as measured when each was given back
	idleMem uint64
	closed  bool

	started, recycled, evicted, killed, crashed, violations, coldStarts atomic.Int64
}

// ErrClosed is returned by calls on a closed pool.
var ErrClosed = errors.New("kcl worker pool is closed")

// New creates a pool; workers start on first use (or Warm).
func New(opts Options) (*Pool, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Pool{opts: o, slots: fairshare.NewLimiter(o.Size, o.PerDomain), stopGC: make(chan struct{}), idle: map[string][]*worker{}}
	go p.expireIdle()
	return p, nil
}

// Options returns the effective options.
func (p *Pool) Options() Options { return p.opts }

// Stats returns the lifecycle counters.
func (p *Pool) Stats() Stats {
	return Stats{Started: p.started.Load(), Recycled: p.recycled.Load(), Evicted: p.evicted.Load(),
		Killed: p.killed.Load(), Crashed: p.crashed.Load(), Violations: p.violations.Load(), ColdStarts: p.coldStarts.Load()}
}

// Session is a render's view of the pool: calls run in a worker of its domain, with the render's
// package directory as working directory.
type Session struct {
	pool   *Pool
	domain Domain
	dir    string
	// YAMLOnly drops the JSON form of rendered results in the worker, so that the output
	// crosses the channel, and sits in this process, once.
	YAMLOnly bool
	// Reserve, when set, is given the size of each answer before it is read; an error (its
	// context ended while it waited) abandons the call and the worker.
	Reserve func(ctx context.Context, size uint64) error
}

// Session returns the engine for one render in domain d, working in dir (which must be inside
// one of d.Roots when the pool is sandboxed).
func (p *Pool) Session(d Domain, dir string) *Session {
	return &Session{pool: p, domain: d, dir: dir}
}

// Call runs one engine method (render.Engine).
func (s *Session) Call(ctx context.Context, method string, args []byte) ([]byte, error) {
	return s.pool.call(ctx, s.domain, request{dir: s.dir, method: method, args: args, yamlOnly: s.YAMLOnly, reserve: s.Reserve})
}

// Call runs one engine method in an unconfined worker of the default domain; a sandboxed pool
// refuses it.
func (p *Pool) Call(ctx context.Context, method string, args []byte) ([]byte, error) {
	return p.call(ctx, Domain{}, request{method: method, args: args})
}

// Warm starts an idle worker for d, so its first render does not pay for start-up.
func (p *Pool) Warm(d Domain) error {
	w, err := p.spawn(d)
	if err != nil {
		return err
	}
	p.give(w)
	return nil
}

// Retire stops the idle workers of a domain that will not render again.
func (p *Pool) Retire(domain string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.idle[domain] {
		w.stop()
	}
	p.setIdle(domain, nil)
}

// call runs one engine method in a worker of d. A worker that dies, overruns the deadline or
// breaks the protocol is killed and the call returns a *WorkerError; the next call gets a fresh
// worker.
func (p *Pool) call(ctx context.Context, d Domain, req request) ([]byte, error) {
	if p.opts.Sandbox && len(d.Roots) == 0 {
		return nil, fmt.Errorf("kcl worker pool: the sandbox is on and domain %q has no root", d.Name)
	}
	waitStart := time.Now()
	// the place is the fast lane's when it was the last free one: cut short after the slice
	ctx, release, err := p.slots.AcquireCuttable(ctx, d.Name)
	if err != nil {
		return nil, err
	}
	defer release()
	if p.opts.Waited != nil {
		p.opts.Waited(d.Name, time.Since(waitStart))
	}

	w, err := p.take(d)
	if err != nil {
		return nil, err
	}
	timeout := p.opts.Timeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := w.call(ctx, timeout.Round(time.Millisecond), req)
	var werr *WorkerError
	if errors.As(err, &werr) {
		if cause := context.Cause(ctx); errors.Is(cause, fairshare.ErrCut) {
			werr.Detail = "the render was " + cause.Error() + "; the worker was killed"
			p.count(werr.Reason)
			return nil, fairshare.Cut(err)
		}
		p.count(werr.Reason)
		return nil, err
	}
	p.give(w)
	return res, err
}

func (p *Pool) count(r Reason) {
	switch r {
	case ReasonTimeout, ReasonCanceled:
		p.killed.Add(1)
	case ReasonProtocol:
		p.violations.Add(1)
	default:
		p.crashed.Add(1)
	}
}

// take returns a live idle worker of d or starts one.
func (p *Pool) take(d Domain) (*worker, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	ws := p.idle[d.Name]
	for len(ws) > 0 {
		w := ws[len(ws)-1]
		ws = ws[:len(ws)-1]
		p.setIdle(d.Name, ws)
		if w.alive() && w.domain.same(d) {
			p.mu.Unlock()
			return w, nil
		}
		if w.alive() {
			w.stop()
		} else {
			p.crashed.Add(1)
		}
	}
	p.mu.Unlock()
	p.coldStarts.Add(1)
	return p.spawn(d)
}

// setIdle replaces a domain's idle list, keeping the total count and memory; p.mu is held.
func (p *Pool) setIdle(name string, ws []*worker) {
	p.nIdle += len(ws) - len(p.idle[name])
	for _, w := range p.idle[name] {
		p.idleMem -= w.idleMem
	}
	for _, w := range ws {
		p.idleMem += w.idleMem
	}
	if len(ws) == 0 {
		delete(p.idle, name)
	} else {
		p.idle[name] = ws
	}
}

// give returns a worker to its domain's idle list, or retires it when it is worn out; the least
// recently used idle workers go when there are more than MaxIdle, or when together they keep
// more than MaxIdleMemory.
func (p *Pool) give(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		w.stop()
		return
	}
	rss, private := w.memory()
	if w.calls >= p.opts.MaxCalls || rss > p.opts.MaxRSS || private > p.opts.MaxIdleMemory {
		p.recycled.Add(1)
		w.stop()
		return
	}
	w.lastUsed, w.idleMem = time.Now(), private
	p.setIdle(w.domain.Name, append(p.idle[w.domain.Name], w))
	for p.nIdle > p.opts.MaxIdle || p.idleMem > p.opts.MaxIdleMemory {
		p.evictOldest(time.Time{})
	}
}

// evictOldest stops the least recently used idle worker, if it was last used before cutoff (a
// zero cutoff evicts it regardless); it reports whether one was stopped. p.mu is held.
func (p *Pool) evictOldest(cutoff time.Time) bool {
	var oldest *worker
	for _, ws := range p.idle {
		// each list is in order of return: its first worker is its oldest
		if oldest == nil || ws[0].lastUsed.Before(oldest.lastUsed) {
			oldest = ws[0]
		}
	}
	if oldest == nil || (!cutoff.IsZero() && !oldest.lastUsed.Before(cutoff)) {
		return false
	}
	p.setIdle(oldest.domain.Name, p.idle[oldest.domain.Name][1:])
	p.evicted.Add(1)
	oldest.stop()
	return true
}

func (p *Pool) expireIdle() {
	t := time.NewTicker(max(p.opts.IdleTimeout/4, time.Second))
	defer t.Stop()
	for {
		select {
		case <-p.stopGC:
			return
		case <-t.C:
			p.mu.Lock()
			for p.evictOldest(time.Now().Add(-p.opts.IdleTimeout)) {
			}
			p.mu.Unlock()
		}
	}
}

func (p *Pool) spawn(d Domain) (*worker, error) {
	w, err := startWorker(p.opts, d)
	if err != nil {
		return nil, err
	}
	p.started.Add(1)
	return w, nil
}

// Close stops idle workers; busy ones stop when their call returns.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	close(p.stopGC)
	for _, ws := range p.idle {
		for _, w := range ws {
			w.stop()
		}
	}
	p.idle, p.nIdle, p.idleMem = map[string][]*worker{}, 0, 0
}
