package depfetch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
)

// Reasons of an Error.
const (
	ReasonTimeout  = "Timeout"
	ReasonCanceled = "Canceled"
	ReasonMemory   = "MemoryLimit"
	ReasonCrash    = "Crashed"
)

// Error is a fetch process that did not answer: killed at its deadline, out of memory, or
// crashed on what a server sent. Detail never quotes the process's output.
type Error struct {
	Reason, Detail string
}

func (e *Error) Error() string { return e.Detail }

// maxResult bounds the answer of a fetch process: package names and paths, warnings.
const maxResult = 16 << 20

// wireRequest is what a fetch process is told on its stdin: credentials never travel as
// arguments, which other processes can read.
type wireRequest struct {
	Options    kclmod.Options     `json:"options"`
	Proxy      string             `json:"proxy,omitempty"`
	PkgDir     string             `json:"pkgDir"`
	SourceRoot string             `json:"sourceRoot"`
	Deps       string             `json:"deps"`
	Creds      kclmod.Credentials `json:"creds"`
}

// wireResult is a fetch process's answer, on fd 3.
type wireResult struct {
	Error          string           `json:"error,omitempty"`
	HostNotAllowed bool             `json:"hostNotAllowed,omitempty"`
	ModDir         string           `json:"modDir,omitempty"`
	Packages       []kclmod.Package `json:"packages,omitempty"`
	Warnings       []string         `json:"warnings,omitempty"`
	Downloads      int              `json:"downloads,omitempty"`
	CacheHits      int              `json:"cacheHits,omitempty"`
}

// run starts a fetch process for req, staging into deps, and waits for its answer.
func (f *Fetcher) run(ctx context.Context, req Request, deps string) (*kclmod.Result, error) {
	in, err := f.request(req, deps)
	if err != nil {
		return nil, err
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	cfg := config{memory: f.o.MemoryLimit, sandbox: f.o.Sandbox, writes: []string{f.o.Resolver.CacheDir, deps}}
	if f.o.Sandbox {
		cfg.reads = req.ReadRoots
		if len(cfg.reads) == 0 {
			cfg.reads = []string{req.SourceRoot}
		}
	}
	out := &head{max: 16 << 10}
	cmd := exec.Command(f.o.Command[0], append(f.o.Command[1:], cfg.args()...)...)
	cmd.Env = passedEnv()
	cmd.Dir = "/"
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{wr}
	// A fetch must not outlive the process waiting for it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	wr.Close()
	if err != nil {
		return nil, fmt.Errorf("starting a dependency fetch: %w", err)
	}
	answer := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(rd, maxResult+1))
		answer <- b
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-exited
		return nil, f.stopped(ctx, out.String())
	case waitErr := <-exited:
		return f.answer(<-answer, waitErr, out.String())
	}
}

func (f *Fetcher) request(req Request, deps string) ([]byte, error) {
	// the process works in /: relative paths are this process's
	var abs [3]string
	for i, p := range []string{req.PkgDir, req.SourceRoot, deps} {
		a, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		abs[i] = a
	}
	w := wireRequest{Options: f.o.Resolver, PkgDir: abs[0], SourceRoot: abs[1], Deps: abs[2], Creds: req.Creds}
	if w.Options.Proxy != nil {
		w.Proxy = w.Options.Proxy.String()
		w.Options.Proxy = nil
	}
	return json.Marshal(w)
}

func (f *Fetcher) stopped(ctx context.Context, output string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Error{Reason: ReasonTimeout, Detail: fmt.Sprintf(
			"fetching %s did not finish within %s; the fetch process was killed", fetching(output), f.o.Timeout)}
	}
	if cause := context.Cause(ctx); errors.Is(cause, fairshare.ErrCut) {
		return fairshare.Cut(&Error{Reason: ReasonCanceled, Detail: "fetching dependencies was " + cause.Error() + "; the fetch process was killed"})
	}
	return &Error{Reason: ReasonCanceled, Detail: "fetching dependencies was cancelled; the fetch process was killed"}
}

// answer reads what the process said, or why it said nothing.
func (f *Fetcher) answer(b []byte, waitErr error, output string) (*kclmod.Result, error) {
	var w wireResult
	if len(b) == 0 || len(b) > maxResult || json.Unmarshal(b, &w) != nil {
		return nil, f.died(waitErr, output)
	}
	if w.Error != "" {
		if w.HostNotAllowed {
			return nil, hostNotAllowedError(w.Error)
		}
		return nil, errors.New(w.Error)
	}
	return &kclmod.Result{ModDir: w.ModDir, Packages: w.Packages, Warnings: w.Warnings,
		Downloads: w.Downloads, CacheHits: w.CacheHits}, nil
}

// died explains a process that gave no answer from its exit and the runtime's own diagnostic,
// never from the rest of its output.
func (f *Fetcher) died(waitErr error, output string) error {
	status := "exited without an answer"
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		status = ee.ProcessState.String()
	}
	which := fetching(output)
	switch {
	case strings.Contains(output, "out of memory"), strings.Contains(output, "cannot allocate memory"):
		return &Error{Reason: ReasonMemory, Detail: fmt.Sprintf("fetching %s exceeded the fetch process's memory limit "+
			"of %d MiB (the server's answer asked for more; %s)", which, f.o.MemoryLimit>>20, status)}
	case strings.Contains(output, "fetch process:"):
		line := output[strings.Index(output, "fetch process:"):]
		if i := strings.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
		}
		return &Error{Reason: ReasonCrash, Detail: "the dependency fetch failed to start: " + line}
	}
	return &Error{Reason: ReasonCrash, Detail: "the process fetching " + which + " died (" + status + ")"}
}

// fetching names the dependency the process was fetching when it stopped.
func fetching(output string) string {
	if dep := lastLine(output, fetchingPrefix); dep != "" {
		return dep
	}
	return "dependencies"
}

// lastLine returns the rest of the last line of s that starts with prefix.
func lastLine(s, prefix string) string {
	var found string
	for _, l := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			found = rest
		}
	}
	return found
}

// hostNotAllowedError keeps kclmod.ErrHostNotAllowed in the chain across the process boundary.
type hostNotAllowedError string

func (e hostNotAllowedError) Error() string { return string(e) }
func (e hostNotAllowedError) Unwrap() error { return kclmod.ErrHostNotAllowed }

// passedEnv is the environment a fetch process gets: where the TLS roots are, nothing else.
func passedEnv() []string {
	var env []string
	for _, k := range []string{"SSL_CERT_FILE", "SSL_CERT_DIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// head keeps the first max bytes written: the Go runtime's reason for dying comes first.
type head struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (h *head) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - len(h.buf); room > 0 {
		h.buf = append(h.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (h *head) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.buf)
}
