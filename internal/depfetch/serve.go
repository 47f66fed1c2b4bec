package depfetch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kcl-flux/kcl-artifact-controller/internal/childproc"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
)

// Subcommand is the hidden command of this binary that runs one dependency fetch.
const Subcommand = "__kcl-deps-fetch"

// ServeIfFetcher runs the fetch and exits when this process was started as a fetch process.
// main (and TestMain of packages that fetch) calls it first.
func ServeIfFetcher() { childproc.ServeIf(Subcommand, processName, serve) }

// Main is a fetch process's entry point; it returns its exit code.
func Main(args []string) int { return childproc.Main(Subcommand, processName, args, serve) }

func serve(b []byte) any {
	var req wireRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return wireResult{Error: fmt.Sprintf("reading the request: %v", err)}
	}
	return fetch(req)
}

// processName is how a fetch process names itself in the line it writes when it cannot start.
const processName = "fetch process"

// fetchingPrefix starts the line a fetch process writes before each server it asks: the only
// line of its output the caller quotes, naming the dependency (never a server's words).
const fetchingPrefix = "fetching "

// fetch resolves and stages the request; every failure is in the answer.
func fetch(req wireRequest) wireResult {
	fail := func(err error) wireResult {
		return wireResult{Error: err.Error(), HostNotAllowed: errors.Is(err, kclmod.ErrHostNotAllowed)}
	}
	var err error
	if req.Options.Proxy, err = kclmod.ParseProxy(req.Proxy); err != nil {
		return fail(err)
	}
	req.Options.OnFetch = func(label string) { fmt.Fprintln(os.Stderr, fetchingPrefix+label) }
	r, err := kclmod.New(req.Options)
	if err != nil {
		return fail(err)
	}
	// the parent's deadline kills the process anyway; a signal lets it end cleanly
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	res, err := r.Resolve(ctx, req.PkgDir, req.SourceRoot, req.Creds)
	if err != nil {
		return fail(err)
	}
	defer res.Release()
	if res.NeedsStaging() {
		if err := res.Stage(req.Deps); err != nil {
			return fail(err)
		}
	}
	return wireResult{ModDir: res.ModDir, Packages: res.Packages, Warnings: res.Warnings,
		Downloads: res.Downloads, CacheHits: res.CacheHits}
}
