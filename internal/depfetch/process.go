package depfetch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/kcl-flux/kcl-artifact-controller/internal/childproc"
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
	cfg := childproc.Config{Memory: f.o.MemoryLimit, Sandbox: f.o.Sandbox, Writes: []string{f.o.Resolver.CacheDir, deps}}
	if f.o.Sandbox {
		cfg.Reads = req.ReadRoots
		if len(cfg.Reads) == 0 {
			cfg.Reads = []string{req.SourceRoot}
		}
	}
	exit, err := childproc.Run(ctx, f.o.Command, cfg, in, maxResult)
	if err != nil {
		return nil, fmt.Errorf("starting a dependency fetch: %w", err)
	}
	if exit.Stopped {
		return nil, f.stopped(ctx, exit)
	}
	return f.answer(exit)
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

func (f *Fetcher) stopped(ctx context.Context, exit childproc.Exit) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Error{Reason: ReasonTimeout, Detail: fmt.Sprintf(
			"fetching %s did not finish within %s; the fetch process was killed", fetching(exit), f.o.Timeout)}
	}
	if cause := context.Cause(ctx); errors.Is(cause, fairshare.ErrCut) {
		return fairshare.Cut(&Error{Reason: ReasonCanceled, Detail: "fetching dependencies was " + cause.Error() + "; the fetch process was killed"})
	}
	return &Error{Reason: ReasonCanceled, Detail: "fetching dependencies was cancelled; the fetch process was killed"}
}

// answer reads what the process said, or why it said nothing.
func (f *Fetcher) answer(exit childproc.Exit) (*kclmod.Result, error) {
	var w wireResult
	if exit.Answer == nil || json.Unmarshal(exit.Answer, &w) != nil {
		return nil, f.died(exit)
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
func (f *Fetcher) died(exit childproc.Exit) error {
	which := fetching(exit)
	if exit.OutOfMemory() {
		return &Error{Reason: ReasonMemory, Detail: fmt.Sprintf("fetching %s exceeded the fetch process's memory limit "+
			"of %d MiB (the server's answer asked for more; %s)", which, f.o.MemoryLimit>>20, exit.Status())}
	}
	if line, ok := exit.StartFailure(processName); ok {
		return &Error{Reason: ReasonCrash, Detail: "the dependency fetch failed to start: " + line}
	}
	return &Error{Reason: ReasonCrash, Detail: "the process fetching " + which + " died (" + exit.Status() + ")"}
}

// fetching names the dependency the process was fetching when it stopped.
func fetching(exit childproc.Exit) string {
	if dep := exit.LastLine(fetchingPrefix); dep != "" {
		return dep
	}
	return "dependencies"
}

// hostNotAllowedError keeps kclmod.ErrHostNotAllowed in the chain across the process boundary.
type hostNotAllowedError string

func (e hostNotAllowedError) Error() string { return string(e) }
func (e hostNotAllowedError) Unwrap() error { return kclmod.ErrHostNotAllowed }
