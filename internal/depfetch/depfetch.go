// Package depfetch resolves kcl.mod dependencies where a hostile registry or Git server can only
// fail its own render: remote dependencies are fetched by a child process (this binary,
// re-executed), one per resolve, with a memory ceiling, a deadline after which it is killed,
// and, sandboxed, Landlock (read its source, write the dependency cache and the render's
// dependency directory, nothing else) and seccomp (no new processes, no ptrace). The process
// that calls Resolve never parses a byte a dependency server sent: the child stages the packages
// into the render's directory and answers with their names and paths.
//
// Vendored and local path dependencies need no server and are resolved in the caller.
package depfetch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/childproc"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
)

// Defaults of Options.
const (
	DefaultMemoryLimit = 512 << 20
	DefaultTimeout     = 2 * time.Minute
	DefaultSize        = 4
)

// Options configure a Fetcher.
type Options struct {
	// Resolver is what fetch processes resolve with. Its Transport must be nil: a process
	// cannot be handed one.
	Resolver kclmod.Options
	// Limits bound the fetch processes; with Sandbox, Resolve needs ReadRoots.
	childproc.Limits
}

func (o Options) withDefaults() (Options, error) {
	if o.Resolver.Transport != nil {
		return o, errors.New("depfetch: a fetch process cannot be given a Transport")
	}
	if o.Resolver.CacheDir != "" {
		dir, err := filepath.Abs(o.Resolver.CacheDir)
		if err != nil {
			return o, err
		}
		o.Resolver.CacheDir = dir
	}
	var err error
	o.Limits, err = o.Limits.WithDefaults(Subcommand, childproc.Limits{MemoryLimit: DefaultMemoryLimit,
		Timeout: DefaultTimeout, Size: DefaultSize})
	return o, err
}

// Fetcher resolves dependencies, fetching remote ones in child processes. It is safe for
// concurrent use.
type Fetcher struct {
	o     Options
	local *kclmod.Resolver // vendored and path dependencies only

	slots *fairshare.Limiter

	downloads, hits, fetches, failures atomic.Int64
}

// New returns a Fetcher.
func New(o Options) (*Fetcher, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	lo := o.Resolver
	lo.ForbidRemote = true
	local, err := kclmod.New(lo)
	if err != nil {
		return nil, err
	}
	f := &Fetcher{o: o, local: local, slots: fairshare.NewLimiter(o.Size, o.PerDomain)}
	return f, nil
}

// Stats returns the totals since New (kclmod.Stats, for the cache metrics).
func (f *Fetcher) Stats() kclmod.Stats {
	return kclmod.Stats{Downloads: f.downloads.Load(), CacheHits: f.hits.Load()}
}

// FetchStats counts fetch processes: started, and failed (any cause).
func (f *Fetcher) FetchStats() (started, failed int64) { return f.fetches.Load(), f.failures.Load() }

// Request is one resolve.
type Request struct {
	// Domain is the trust domain (the namespace): it bounds how many fetches run for it at once.
	Domain string
	// PkgDir is the package rendered; SourceRoot the source it is in (path dependencies stay inside).
	PkgDir, SourceRoot string
	// ReadRoots are what a sandboxed fetch process may read besides the cache: the source.
	ReadRoots []string
	// Deps returns (and creates) the directory fetched packages are staged in; it is called only
	// when something is fetched. The packages stay there after Resolve, whatever the cache does.
	Deps func() (string, error)
	// Creds are the tenant's registry and Git credentials, for this resolve only.
	Creds kclmod.Credentials
}

// Resolve resolves the dependencies of req.PkgDir. Vendored and path dependencies are resolved
// here; if any dependency is remote, all of them are resolved by a fetch process. The result's
// fetched packages are already staged (NeedsStaging is false).
func (f *Fetcher) Resolve(ctx context.Context, req Request) (*kclmod.Result, error) {
	res, err := f.local.Resolve(ctx, req.PkgDir, req.SourceRoot, req.Creds)
	if err == nil || !errors.Is(err, kclmod.ErrRemoteForbidden) || f.o.Resolver.ForbidRemote {
		return res, err
	}
	deps, err := req.Deps()
	if err != nil {
		return nil, fmt.Errorf("staging dependencies: %w", err)
	}
	if err := os.MkdirAll(deps, 0o700); err != nil {
		return nil, fmt.Errorf("staging dependencies: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, f.o.Timeout)
	defer cancel()
	// the place is the fast lane's when it was the last free one: cut short after the slice
	ctx, release, err := f.slots.AcquireCuttable(ctx, req.Domain)
	if errors.Is(err, context.Canceled) {
		return nil, &Error{Reason: ReasonCanceled, Detail: "fetching dependencies was cancelled while waiting for a fetch slot"}
	}
	if err != nil {
		return nil, &Error{Reason: ReasonTimeout, Detail: fmt.Sprintf(
			"waited %s for a dependency fetch slot (%d in all, %d per namespace)", f.o.Timeout, f.o.Size, f.o.PerDomain)}
	}
	defer release()
	f.fetches.Add(1)
	out, err := f.run(ctx, req, deps)
	if err != nil {
		f.failures.Add(1)
		return nil, err
	}
	f.downloads.Add(int64(out.Downloads))
	f.hits.Add(int64(out.CacheHits))
	return out, nil
}
