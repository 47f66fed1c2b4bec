package depfetch_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/childproc"
	"github.com/kcl-flux/kcl-artifact-controller/internal/depfetch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
	"github.com/kcl-flux/kcl-artifact-controller/internal/sandbox"
)

// The test binary doubles as the fetch process.
func TestMain(m *testing.M) {
	depfetch.ServeIfFetcher()
	os.Exit(m.Run())
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// newFetcher returns a sandboxed Fetcher that may reach the test servers on 127.0.0.1.
func newFetcher(t *testing.T, o depfetch.Options) *depfetch.Fetcher {
	t.Helper()
	if err := sandbox.Check(); err != nil {
		t.Fatalf("this test needs Landlock: %v", err)
	}
	o.Sandbox = true
	if o.Resolver.CacheDir == "" {
		o.Resolver.CacheDir = t.TempDir()
	}
	o.Resolver.AllowedNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	f, err := depfetch.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// request is a resolve of the package app in a source root of its own, staging into a fresh
// directory.
func request(t *testing.T, domain, app string) (depfetch.Request, string) {
	deps := filepath.Join(t.TempDir(), "deps")
	return depfetch.Request{Domain: domain, PkgDir: app, SourceRoot: app, ReadRoots: []string{app},
		Deps: func() (string, error) { return deps, nil }}, deps
}

func app(t *testing.T, deps ...string) string {
	return kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", deps, nil)
}

// peakRSS is this process's peak resident memory (VmHWM), in bytes.
func peakRSS(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// OCI and Git dependencies are fetched by a confined process and staged: the packages are in
// the dependency directory, readable after the process is gone.
func TestFetchesInAConfinedProcessAndStages(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "user", "pw")
	gs := kclmodtest.StartGitServer(t)
	lib := kclmodtest.WritePackage(t, t.TempDir(), "lib", "1.0.0", nil, map[string]string{"lib.k": "v = 1\n"})
	if _, err := reg.PushPackage(ctx(t), reg.Host+"/team/lib:1.0.0", lib, kclmodtest.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	gs.CreateRepo("other", lib)
	gs.Tag("other", "v1")
	f := newFetcher(t, depfetch.Options{})
	req, deps := request(t, "tenant-a", app(t,
		fmt.Sprintf(`lib = { oci = "oci://%s/team/lib", tag = "1.0.0" }`, reg.Host),
		fmt.Sprintf(`other = { git = "%s", tag = "v1" }`, gs.URL("other"))))
	req.Creds = kclmod.Credentials{DockerConfigJSON: reg.DockerConfigJSON()}
	res, err := f.Resolve(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Packages) != 2 || res.Downloads != 2 {
		t.Fatalf("%+v", res)
	}
	for _, p := range res.Packages {
		if !strings.HasPrefix(p.Path, deps+string(filepath.Separator)) {
			t.Fatalf("%s is not staged in %s", p.Path, deps)
		}
		if b, err := os.ReadFile(filepath.Join(p.Path, "lib.k")); err != nil || string(b) != "v = 1\n" {
			t.Fatalf("%s: %q %v", p.Name, b, err)
		}
	}
	if started, _ := f.FetchStats(); started != 1 {
		t.Fatalf("%d fetch processes", started)
	}
}

// Vendored and path dependencies need no server: no process is started for them.
func TestLocalDependenciesStayInProcess(t *testing.T) {
	root := t.TempDir()
	kclmodtest.WritePackage(t, filepath.Join(root, "lib"), "lib", "1.0.0", nil, map[string]string{"lib.k": "v = 1\n"})
	a := kclmodtest.WritePackage(t, filepath.Join(root, "app"), "app", "0.1.0", []string{`lib = { path = "../lib" }`}, nil)
	f := newFetcher(t, depfetch.Options{})
	req := depfetch.Request{Domain: "a", PkgDir: a, SourceRoot: root,
		Deps: func() (string, error) { t.Fatal("a directory was asked for"); return "", nil }}
	res, err := f.Resolve(ctx(t), req)
	if err != nil || len(res.Packages) != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	if started, _ := f.FetchStats(); started != 0 {
		t.Fatalf("%d fetch processes for a path dependency", started)
	}
}

// A Git server whose pack header claims more objects than exist: go-git allocates for all of
// them and the Go runtime stops the process that tries (fatal error: out of memory, not a
// panic). Watched first with the fetch in this process: the test binary died. kclmod now refuses
// such a header as it arrives; with its bound raised here (a count under it still asks for 64
// GiB), what is left is the process: only the fetch process dies, the resolve fails with a clear
// reason, this process's memory does not move, and the next resolve works.
func TestLyingPackHeaderKillsOnlyTheFetch(t *testing.T) {
	liar := kclmodtest.LyingPackServer(t, 1<<31-1)
	f := newFetcher(t, depfetch.Options{Resolver: kclmod.Options{MaxPackageFiles: 1 << 30}})
	before := peakRSS(t)
	req, _ := request(t, "tenant-a", app(t, fmt.Sprintf(`dep = { git = "%s/git/x", branch = "main" }`, liar.Server.URL)))
	_, err := f.Resolve(ctx(t), req)
	var fe *depfetch.Error
	if !errors.As(err, &fe) || (fe.Reason != depfetch.ReasonMemory && fe.Reason != depfetch.ReasonCrash) {
		t.Fatalf("want a fetch process killed by its memory limit, got %v", err)
	}
	after := peakRSS(t)
	t.Logf("%v; this process's peak RSS %d MiB before, %d MiB after", err, before>>20, after>>20)
	if after-before > 64<<20 {
		t.Fatalf("this process's peak RSS grew by %d MiB", (after-before)>>20)
	}

	gs := kclmodtest.StartGitServer(t)
	gs.CreateRepo("lib", kclmodtest.WritePackage(t, t.TempDir(), "lib", "1.0.0", nil, nil))
	gs.Tag("lib", "v1")
	good, _ := request(t, "tenant-a", app(t, fmt.Sprintf(`lib = { git = "%s", tag = "v1" }`, gs.URL("lib"))))
	if _, err := f.Resolve(ctx(t), good); err != nil {
		t.Fatalf("the resolve after the crash: %v", err)
	}
}

// A server that never finishes (the minimum speed off) holds the fetch until its deadline,
// when the process is killed.
func TestDeadlineKillsTheFetch(t *testing.T) {
	release := make(chan struct{})
	stall := kclmodtest.StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) {
		<-release
	})
	t.Cleanup(func() { close(release) })
	f := newFetcher(t, depfetch.Options{Limits: childproc.Limits{Timeout: 2 * time.Second}, Resolver: kclmod.Options{MinSpeed: -1}})
	req, _ := request(t, "tenant-a", app(t, fmt.Sprintf(`lib = { oci = "oci://%s/team/lib", tag = "1.0.0" }`, stall.Host)))
	start := time.Now()
	_, err := f.Resolve(ctx(t), req)
	var fe *depfetch.Error
	if !errors.As(err, &fe) || fe.Reason != depfetch.ReasonTimeout {
		t.Fatalf("want a timeout, got %v", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the 2s deadline took %s", took)
	}
}

// A tenant whose fetches stall holds at most its share of the fetch processes: another
// namespace's fetch runs meanwhile.
func TestStalledTenantHoldsOnlyItsShare(t *testing.T) {
	release := make(chan struct{})
	stalled := make(chan struct{}, 8)
	stall := kclmodtest.StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) {
		stalled <- struct{}{}
		<-release
	})
	t.Cleanup(func() { close(release) })
	reg := kclmodtest.StartRegistry(t, "", "")
	lib := kclmodtest.WritePackage(t, t.TempDir(), "lib", "1.0.0", nil, map[string]string{"lib.k": "v = 1\n"})
	if _, err := reg.PushPackage(ctx(t), reg.Host+"/team/lib:1.0.0", lib, kclmodtest.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	f := newFetcher(t, depfetch.Options{Limits: childproc.Limits{Size: 2, PerDomain: 1}, Resolver: kclmod.Options{MinSpeed: -1}})
	hostileDone := make(chan error, 3)
	for range 3 {
		req, _ := request(t, "hostile", app(t, fmt.Sprintf(`lib = { oci = "oci://%s/team/lib", tag = "1.0.0" }`, stall.Host)))
		go func() { _, err := f.Resolve(ctx(t), req); hostileDone <- err }()
	}
	<-stalled
	req, _ := request(t, "other", app(t, fmt.Sprintf(`lib = { oci = "oci://%s/team/lib", tag = "1.0.0" }`, reg.Host)))
	if _, err := f.Resolve(ctx(t), req); err != nil {
		t.Fatalf("the other namespace's fetch: %v", err)
	}
	select {
	case err := <-hostileDone:
		t.Fatalf("a stalled fetch finished before the other namespace's: %v", err)
	default:
	}
	if n := len(stalled); n != 0 {
		t.Fatalf("%d more of the stalled tenant's fetches reached its server: it holds more than its share", n)
	}
}

// A confined fetch process reads its ReadRoots and nothing else: given a source outside them,
// it cannot even read the package's kcl.mod (without Landlock it would, and fetch).
func TestFetchProcessReadsOnlyItsRoots(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	lib := kclmodtest.WritePackage(t, t.TempDir(), "lib", "1.0.0", nil, map[string]string{"lib.k": "v = 1\n"})
	if _, err := reg.PushPackage(ctx(t), reg.Host+"/team/lib:1.0.0", lib, kclmodtest.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	req, _ := request(t, "tenant-a", app(t, fmt.Sprintf(`lib = { oci = "oci://%s/team/lib", tag = "1.0.0" }`, reg.Host)))
	req.ReadRoots = []string{t.TempDir()}
	_, err := newFetcher(t, depfetch.Options{}).Resolve(ctx(t), req)
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("want the source refused to the confined process, got %v", err)
	}
	if reg.ManifestGets() != 0 {
		t.Fatalf("the confined process reached the registry (%d manifest GETs)", reg.ManifestGets())
	}
}

// The confined fetch process reads this host's addresses (a netlink request, which neither
// Landlock nor its seccomp filter blocks) and refuses them: were they unreadable, every address
// outside AllowedNetworks would be refused as unchecked, and this one with another reason.
func TestFetchProcessRefusesThisHostsAddress(t *testing.T) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var own netip.Addr
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() && ip.Unmap().Is4() {
				own = ip.Unmap()
				break
			}
		}
	}
	if !own.IsValid() {
		t.Skip("this machine has no IPv4 address but loopback and link-local")
	}
	// port 1: nothing is meant to answer; the refusal comes before any connection
	host := netip.AddrPortFrom(own, 1).String()
	req, _ := request(t, "tenant-a", app(t, fmt.Sprintf(`lib = { oci = "oci://%s/team/lib", tag = "1.0.0" }`, host)))
	_, err = newFetcher(t, depfetch.Options{}).Resolve(ctx(t), req)
	if !errors.Is(err, kclmod.ErrHostNotAllowed) || !strings.Contains(err.Error(), own.String()+" is one of this host's own addresses") {
		t.Fatalf("want %s refused as this host's address by the confined process, got %v", own, err)
	}
}
