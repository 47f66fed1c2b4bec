package depfetch

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/sandbox"
)

// Subcommand is the hidden command of this binary that runs one dependency fetch.
const Subcommand = "__kcl-deps-fetch"

// ServeIfFetcher runs the fetch and exits when this process was started as a fetch process.
// main (and TestMain of packages that fetch) calls it first.
func ServeIfFetcher() {
	if len(os.Args) > 1 && os.Args[1] == Subcommand {
		os.Exit(Main(os.Args[2:]))
	}
}

// config is what a fetch process is started with; the request itself comes on stdin.
type config struct {
	memory   uint64
	sandbox  bool
	confined bool     // the re-executed process, already inside the sandbox
	reads    []string // trees it may read
	writes   []string // trees it may write: the cache and the render's dependency directory
}

func (c config) args() []string {
	a := []string{"--memory=" + strconv.FormatUint(c.memory, 10)}
	for _, r := range c.reads {
		a = append(a, "--read="+r)
	}
	for _, w := range c.writes {
		a = append(a, "--write="+w)
	}
	if c.sandbox {
		a = append(a, "--sandbox")
	}
	if c.confined {
		a = append(a, "--confined")
	}
	return a
}

func parseConfig(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet(Subcommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Uint64Var(&c.memory, "memory", DefaultMemoryLimit, "")
	fs.Func("read", "", func(v string) error { c.reads = append(c.reads, v); return nil })
	fs.Func("write", "", func(v string) error { c.writes = append(c.writes, v); return nil })
	fs.BoolVar(&c.sandbox, "sandbox", false, "")
	fs.BoolVar(&c.confined, "confined", false, "")
	return c, fs.Parse(args)
}

// Main is a fetch process's entry point; it returns its exit code.
func Main(args []string) int {
	c, err := parseConfig(args)
	if err != nil {
		return fatal(err)
	}
	if c.sandbox && !c.confined {
		return fatal(enterSandbox(c))
	}
	if !c.sandbox {
		if err := sandbox.SetLimits(sandbox.Limits{Memory: c.memory}); err != nil {
			return fatal(err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fatal(err)
	}
	if c.sandbox {
		if err := sandbox.SeccompNetworked(); err != nil {
			return fatal(err)
		}
	}
	// collect well before the ceiling, so that only an answer asking for more than it fails
	debug.SetMemoryLimit(int64(c.memory) / 4 * 3)
	var req wireRequest
	if err := json.NewDecoder(io.LimitReader(os.Stdin, 4<<20)).Decode(&req); err != nil {
		return fatal(fmt.Errorf("reading the request: %w", err))
	}
	res := fetch(req)
	out := os.NewFile(3, "answer")
	if err := json.NewEncoder(out).Encode(res); err != nil {
		return fatal(err)
	}
	return 0
}

// fetchingPrefix starts the line a fetch process writes before each server it asks: the only
// line of its output the caller quotes, naming the dependency (never a server's words).
const fetchingPrefix = "fetching "

func fatal(err error) int {
	fmt.Fprintln(os.Stderr, "fetch process:", err)
	return 3
}

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

// enterSandbox confines this thread (Landlock: read the source and the system's TLS roots and
// resolver configuration, write the cache and the dependency directory, TCP allowed) and
// replaces the process with a copy of itself, confined on every thread. It returns only on
// failure.
func enterSandbox(c config) error {
	runtime.LockOSThread()
	if err := sandbox.SetLimits(sandbox.Limits{Memory: c.memory}); err != nil {
		return err
	}
	p := sandbox.Policy{ReadDirs: append(existing(systemDirs), c.reads...), ReadFiles: existing(systemFiles),
		WriteDirs: c.writes, Network: true}
	for _, k := range []string{"SSL_CERT_FILE", "SSL_CERT_DIR"} {
		if v := os.Getenv(k); v != "" {
			if st, err := os.Stat(v); err == nil && st.IsDir() {
				p.ReadDirs = append(p.ReadDirs, v)
			} else if err == nil {
				p.ReadFiles = append(p.ReadFiles, v)
			}
		}
	}
	c.confined = true
	return sandbox.Reexec(p, append([]string{Subcommand}, c.args()...), passedEnv())
}

// What Go's TLS and DNS read: the system's certificate bundles and resolver configuration.
var (
	systemDirs = []string{"/etc/ssl", "/etc/pki", "/etc/ca-certificates", "/usr/share/ca-certificates",
		"/usr/local/share/ca-certificates", "/etc/certs"}
	systemFiles = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf"}
)

func existing(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}
