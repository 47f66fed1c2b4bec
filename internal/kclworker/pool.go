package kclworker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Pool. Zero values take the defaults below.
type Options struct {
	// Size bounds how many workers, hence renders, run at once.
	Size int
	// LibPath is the engine library handed to workers; empty lets them search (kcllib.Find).
	LibPath string
	// Timeout applies to a call whose context has no earlier deadline.
	Timeout time.Duration
	// MemoryLimit is each worker's address-space ceiling in bytes (RLIMIT_AS).
	MemoryLimit uint64
	// MaxCalls recycles a worker after this many calls: the engine never frees its results.
	MaxCalls int
	// MaxRSS recycles a worker whose resident memory grew past this many bytes.
	MaxRSS uint64
	// Command starts a worker; it defaults to this executable with Subcommand.
	Command []string
}

// Defaults for Options.
const (
	DefaultSize        = 2
	DefaultTimeout     = 2 * time.Minute
	DefaultMemoryLimit = 2 << 30
	DefaultMaxCalls    = 500
	DefaultMaxRSS      = 768 << 20
)

func (o Options) withDefaults() (Options, error) {
	if o.Size <= 0 {
		o.Size = DefaultSize
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MemoryLimit == 0 {
		o.MemoryLimit = DefaultMemoryLimit
	}
	if o.MaxCalls <= 0 {
		o.MaxCalls = DefaultMaxCalls
	}
	if o.MaxRSS == 0 {
		o.MaxRSS = DefaultMaxRSS
	}
	if len(o.Command) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("locating this executable to start KCL workers: %w", err)
		}
		o.Command = []string{exe, Subcommand}
	}
	return o, nil
}

// Stats counts worker lifecycle events since the pool was created.
type Stats struct {
	Started  int64 // worker processes started
	Recycled int64 // retired after MaxCalls or MaxRSS
	Killed   int64 // killed on timeout or cancellation
	Crashed  int64 // died on their own (signal, abort, memory limit)
}

// Pool hands calls to worker processes, at most Size at once.
type Pool struct {
	opts   Options
	tokens chan struct{}

	mu     sync.Mutex
	idle   []*worker
	closed bool

	started, recycled, killed, crashed atomic.Int64
}

// ErrClosed is returned by calls on a closed pool.
var ErrClosed = errors.New("kcl worker pool is closed")

// New creates a pool; workers start on first use (or Warm).
func New(opts Options) (*Pool, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Pool{opts: o, tokens: make(chan struct{}, o.Size)}
	for range o.Size {
		p.tokens <- struct{}{}
	}
	return p, nil
}

// Options returns the effective options.
func (p *Pool) Options() Options { return p.opts }

// Stats returns the lifecycle counters.
func (p *Pool) Stats() Stats {
	return Stats{Started: p.started.Load(), Recycled: p.recycled.Load(),
		Killed: p.killed.Load(), Crashed: p.crashed.Load()}
}

// Warm starts idle workers up to the pool size, so the first renders do not pay for start-up.
func (p *Pool) Warm() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.idle) < p.opts.Size && !p.closed {
		w, err := p.spawn()
		if err != nil {
			return err
		}
		p.idle = append(p.idle, w)
	}
	return nil
}

// Call runs one engine method in a worker. A worker that dies or overruns the deadline is killed
// and the call returns a *WorkerError; the next call gets a fresh worker.
func (p *Pool) Call(ctx context.Context, method string, args []byte) ([]byte, error) {
	select {
	case <-p.tokens:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { p.tokens <- struct{}{} }()

	w, err := p.take()
	if err != nil {
		return nil, err
	}
	timeout := p.opts.Timeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = time.Until(d)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := w.call(ctx, timeout.Round(time.Millisecond), method, args)
	var werr *WorkerError
	if errors.As(err, &werr) {
		p.count(werr.Reason)
		return nil, err
	}
	p.give(w)
	return res, err
}

func (p *Pool) count(r Reason) {
	if r == ReasonTimeout || r == ReasonCanceled {
		p.killed.Add(1)
	} else {
		p.crashed.Add(1)
	}
}

// take returns a live idle worker or starts one.
func (p *Pool) take() (*worker, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	for len(p.idle) > 0 {
		w := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if w.alive() {
			return w, nil
		}
		p.crashed.Add(1)
	}
	return p.spawn()
}

// give returns a worker to the idle list, or retires it when it is worn out.
func (p *Pool) give(w *worker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		w.stop()
		return
	}
	if w.calls >= p.opts.MaxCalls || w.rss() > p.opts.MaxRSS {
		p.recycled.Add(1)
		w.stop()
		return
	}
	p.idle = append(p.idle, w)
}

func (p *Pool) spawn() (*worker, error) {
	w, err := startWorker(p.opts)
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
	p.closed = true
	for _, w := range p.idle {
		w.stop()
	}
	p.idle = nil
}
