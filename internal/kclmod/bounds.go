package kclmod

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of the transfer bounds (Options.MinSpeed, Options.LowSpeedTime).
const (
	DefaultMinSpeed     = int64(1024)
	DefaultLowSpeedTime = 30 * time.Second
)

// The largest answers read, besides packages: an error answer's body is read this far and
// dropped (it is never shown), and metadata (manifests, tag lists, tokens, Git reference
// advertisements) fails past its bound.
const (
	maxErrorBody    = 64 << 10
	maxMetadataBody = 8 << 20
)

// BoundError is a transfer stopped by a bound: an answer too large or too slow. It names the
// bound, never what the server sent.
type BoundError struct {
	// What the answer was ("the tag list", "the Git pack", ...).
	What string
	// Limit, for an answer too large, in bytes.
	Limit int64
	// MinSpeed and Window, for an answer too slow.
	MinSpeed int64
	Window   time.Duration
	// Objects and MaxObjects, for a Git pack claiming too many objects.
	Objects, MaxObjects uint32
}

func (e *BoundError) Error() string {
	if e.MaxObjects > 0 {
		return fmt.Sprintf("%s claims %d objects, more than the %d a package within the bounds can hold; the transfer was stopped",
			e.What, e.Objects, e.MaxObjects)
	}
	if e.MinSpeed > 0 {
		return fmt.Sprintf("%s arrived slower than %d bytes/s over %s; the transfer was stopped", e.What, e.MinSpeed, e.Window)
	}
	return fmt.Sprintf("%s is larger than %d bytes; the transfer was stopped", e.What, e.Limit)
}

// transferBounds are the bounds every request of a Resolver is held to.
type transferBounds struct {
	maxPackage int64
	maxObjects uint32
	minSpeed   int64
	window     time.Duration
}

func newTransferBounds(o Options) transferBounds {
	// a depth-1 pack holds the tree's entries, the commit and the trees; a full clone (a short
	// commit id) its history too
	b := transferBounds{maxPackage: o.MaxPackageBytes, minSpeed: o.MinSpeed, window: o.LowSpeedTime,
		maxObjects: uint32(min(int64(o.MaxPackageFiles)*4+10000, 1<<31))}
	if b.minSpeed == 0 {
		b.minSpeed = DefaultMinSpeed
	}
	if b.window <= 0 {
		b.window = DefaultLowSpeedTime
	}
	return b
}

// bounded holds every exchange to the bounds: the answer must keep the minimum speed from the
// request on (headers included), an error answer's body is dropped unread past maxErrorBody,
// and a successful one fails past the bound of what it is.
type bounded struct {
	b    transferBounds
	next http.RoundTripper
	// errorBodies keeps an error answer's body, read under the same bounds as a successful one:
	// for HTTP's callers, which read a server's error themselves (and never show it whole).
	errorBodies bool
}

func (t bounded) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	what, limit, pack := t.answerOf(req.URL)
	w := t.b.watch(ctx, cancel, what)
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		w.stop()
		if be := w.failure(); be != nil {
			return nil, be
		}
		return nil, err
	}
	if resp.StatusCode >= http.StatusBadRequest && !t.errorBodies {
		// kept for its status alone: clients quote bodies in their errors
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
		w.stop()
		resp.Body, resp.ContentLength = http.NoBody, 0
		resp.Header.Del("Content-Length")
		return resp, nil
	}
	w.limit = limit
	w.body = resp.Body
	resp.Body = w
	if pack {
		resp.Body = newPackCheck(w, t.b.maxObjects, w.failLocked)
	}
	return resp, nil
}

// answerOf tells what a request asks for: its name in errors, the most of it read, and whether
// it is a Git pack (whose header is checked).
func (t bounded) answerOf(u *url.URL) (what string, limit int64, pack bool) {
	p := u.Path
	// a package: a pack carries the protocol's framing and the commit and trees besides the files
	packageLimit := t.b.maxPackage + t.b.maxPackage/8 + 1<<20
	switch {
	case strings.Contains(p, "/blobs/"):
		return "the package layer", packageLimit, false
	case strings.HasSuffix(p, "/git-upload-pack"):
		return "the Git pack", packageLimit, true
	case strings.Contains(p, "/manifests/"):
		return "the manifest", maxMetadataBody, false
	case strings.HasSuffix(p, "/tags/list"):
		return "the tag list", maxMetadataBody, false
	case strings.HasSuffix(p, "/info/refs"):
		return "the Git reference list", maxMetadataBody, false
	}
	return "the answer of " + u.Host, maxMetadataBody, false
}

// watchedBody is an answer being read under the bounds. Its watch fails the request, through the
// request's context, when a window passes with fewer than minSpeed*window bytes.
type watchedBody struct {
	body   io.ReadCloser
	limit  int64
	what   string
	b      transferBounds
	cancel context.CancelCauseFunc
	ctx    context.Context

	mu     sync.Mutex
	read   int64
	mark   int64
	timer  *time.Timer
	failed *BoundError
	done   bool
}

func (b transferBounds) watch(ctx context.Context, cancel context.CancelCauseFunc, what string) *watchedBody {
	w := &watchedBody{what: what, b: b, cancel: cancel, ctx: ctx}
	if b.minSpeed > 0 {
		w.timer = time.AfterFunc(b.window, w.check)
	}
	return w
}

// check runs at the end of each window.
func (w *watchedBody) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	if got := w.read - w.mark; float64(got) < float64(w.b.minSpeed)*w.b.window.Seconds() {
		w.fail(&BoundError{What: w.what, MinSpeed: w.b.minSpeed, Window: w.b.window})
		return
	}
	w.mark = w.read
	w.timer.Reset(w.b.window)
}

// fail records the bound broken (in the fetch's guard too, which reports it whatever the client
// made of the error) and aborts the request. Called with mu held.
func (w *watchedBody) fail(e *BoundError) {
	if w.failed == nil {
		w.failed = e
		if cg := guardFrom(w.ctx); cg != nil {
			cg.recordBound(e)
		}
	}
	w.cancel(e)
}

func (w *watchedBody) failLocked(e *BoundError) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail(e)
}

func (w *watchedBody) failure() *BoundError {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failed
}

func (w *watchedBody) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
	if w.failed == nil {
		w.cancel(nil)
	}
}

func (w *watchedBody) Read(p []byte) (int, error) {
	n, err := w.body.Read(p)
	w.mu.Lock()
	w.read += int64(n)
	if w.read > w.limit {
		w.fail(&BoundError{What: w.what, Limit: w.limit})
	}
	failed := w.failed
	w.mu.Unlock()
	if failed != nil {
		return 0, failed
	}
	if errors.Is(err, io.EOF) {
		w.stop()
	}
	return n, err
}

func (w *watchedBody) Close() error {
	w.stop()
	return w.body.Close()
}

// packCheck reads the header of the pack in a git-upload-pack answer as it passes (in side-band
// pkt-lines or raw after the NAK) and fails the answer when the header claims more objects than
// a package within the bounds can hold: go-git allocates for the claimed count before reading
// any object, so a header claiming four billion asks for 128 GiB.
type packCheck struct {
	body io.ReadCloser
	max  uint32
	fail func(*BoundError) // records the refusal in the fetch's guard

	seen    int64
	done    bool
	lenBuf  []byte // the pkt-line length being read
	payload int    // bytes left in the current pkt-line, -1 between lines
	first   bool   // the next payload byte is the line's first
	data    bool   // the current line carries side-band channel 1 (pack data)
	header  []byte // the pack header so far
}

func newPackCheck(body io.ReadCloser, maxObjects uint32, fail func(*BoundError)) *packCheck {
	return &packCheck{body: body, max: maxObjects, fail: fail, payload: -1}
}

func (p *packCheck) Read(b []byte) (int, error) {
	n, err := p.body.Read(b)
	if !p.done {
		if ferr := p.feed(b[:n]); ferr != nil {
			return 0, ferr
		}
	}
	return n, err
}

func (p *packCheck) Close() error { return p.body.Close() }

// feed advances the parser over b; it stops looking once the header is checked, or after 1 MiB
// without one (then the answer is not a pack this check understands, and go-git will say so).
func (p *packCheck) feed(b []byte) error {
	for _, c := range b {
		if p.seen++; p.seen > 1<<20 {
			p.done = true
			return nil
		}
		if err := p.step(c); err != nil || p.done {
			return err
		}
	}
	return nil
}

func (p *packCheck) step(c byte) error {
	switch {
	case p.payload < 0 && len(p.header) > 0: // a raw pack after the NAK
		return p.headerByte(c)
	case p.payload < 0:
		p.lenBuf = append(p.lenBuf, c)
		if len(p.lenBuf) < 4 {
			return nil
		}
		s := string(p.lenBuf)
		p.lenBuf = p.lenBuf[:0]
		if s == "PACK" {
			p.header = []byte(s)
			return nil
		}
		n, err := strconv.ParseUint(s, 16, 16)
		if err != nil {
			p.done = true // not pkt-lines: go-git reports it
			return nil
		}
		if n > 4 {
			p.payload, p.first = int(n)-4, true
		}
		return nil
	}
	p.payload--
	if p.first {
		p.first, p.data = false, c == 1
	} else if p.data {
		if err := p.headerByte(c); err != nil || p.done {
			return err
		}
	}
	if p.payload == 0 {
		p.payload = -1
	}
	return nil
}

func (p *packCheck) headerByte(c byte) error {
	p.header = append(p.header, c)
	if len(p.header) < 12 {
		return nil
	}
	p.done = true
	if string(p.header[:4]) != "PACK" {
		return nil
	}
	if count := binary.BigEndian.Uint32(p.header[8:12]); count > p.max {
		e := &BoundError{What: "the Git pack", Objects: count, MaxObjects: p.max}
		p.fail(e)
		return e
	}
	return nil
}
