package sourcecache

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
	"github.com/kcl-flux/kcl-artifact-controller/internal/source"
)

// server serves body and counts the downloads.
func server(t *testing.T, body []byte, downloads *atomic.Int64) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		downloads.Add(1)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/a.tar.gz"
}

func artifact(url string, body []byte) *meta.Artifact {
	return &meta.Artifact{URL: url, Revision: "main@sha1:x", Digest: fmt.Sprintf("sha256:%x", sha256.Sum256(body))}
}

// newCache uses the real fetcher: download, digest verification and safe untar.
func newCache(t *testing.T, opts Options) *Cache {
	t.Helper()
	f := source.NewFetcher(source.Limits{Retries: 0, MaxDownloadSize: 1 << 20, MaxUntarSize: 1 << 20, MaxEntries: 100})
	root := t.TempDir()
	opts.DirFor = func(ns string) (string, error) {
		d := filepath.Join(root, ns, "sources")
		return d, os.MkdirAll(d, 0o700)
	}
	opts.Fetch = f.Fetch
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func TestOneDownloadPerRevision(t *testing.T) {
	body := kclmodtest.TarGz(map[string]string{"main.k": "a = 1\n", "sub/b.k": "b = 2\n"})
	var downloads atomic.Int64
	a := artifact(server(t, body, &downloads), body)
	var hits atomic.Int64
	c := newCache(t, Options{Observe: func(hit bool) {
		if hit {
			hits.Add(1)
		}
	}})
	stage := t.TempDir()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Stage(context.Background(), "team-a", a, filepath.Join(stage, fmt.Sprint(i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := downloads.Load(); n != 1 {
		t.Fatalf("%d downloads for one revision staged 8 times", n)
	}
	if hits.Load() != 7 {
		t.Fatalf("hits = %d, want 7", hits.Load())
	}
	for i := range 8 {
		if got := read(t, filepath.Join(stage, fmt.Sprint(i), "sub", "b.k")); got != "b = 2\n" {
			t.Fatalf("staged copy %d: %q", i, got)
		}
	}
	// hard links: one inode for every render's copy
	if inode(t, filepath.Join(stage, "0", "main.k")) != inode(t, filepath.Join(stage, "7", "main.k")) {
		t.Fatal("renders do not share the staged files")
	}
}

// Unconfined renders could write what they read: they get copies.
func TestCopiesWhenAsked(t *testing.T) {
	body := kclmodtest.TarGz(map[string]string{"main.k": "a = 1\n"})
	var downloads atomic.Int64
	a := artifact(server(t, body, &downloads), body)
	c := newCache(t, Options{Copy: true})
	stage := t.TempDir()
	for _, d := range []string{"x", "y"} {
		if err := c.Stage(context.Background(), "ns", a, filepath.Join(stage, d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(stage, "x", "main.k"), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(stage, "y", "main.k")); got != "a = 1\n" {
		t.Fatalf("a write to one render's copy reached another: %q", got)
	}
}

// A digest is not a capability: another namespace claiming the digest of a cached tree, with an
// address of its own, downloads from that address and fails verification; it is never handed
// the cached files.
func TestDigestOfAnotherNamespaceIsNotServed(t *testing.T) {
	secret := kclmodtest.TarGz(map[string]string{"main.k": "password = \"hunter2\"\n"})
	var downloads, attackerDownloads atomic.Int64
	victim := artifact(server(t, secret, &downloads), secret)
	c := newCache(t, Options{})
	if err := c.Stage(context.Background(), "victim", victim, filepath.Join(t.TempDir(), "v")); err != nil {
		t.Fatal(err)
	}
	claim := *victim
	claim.URL = server(t, kclmodtest.TarGz(map[string]string{"main.k": "x = 1\n"}), &attackerDownloads)
	dst := filepath.Join(t.TempDir(), "attacker")
	err := c.Stage(context.Background(), "attacker", &claim, dst)
	if err == nil {
		t.Fatalf("the attacker's namespace was served the victim's source: %q", read(t, filepath.Join(dst, "main.k")))
	}
	if attackerDownloads.Load() != 1 {
		t.Fatalf("the claim was not checked against its own address (%d downloads): %v", attackerDownloads.Load(), err)
	}
}

func TestFailedDownloadIsNotCached(t *testing.T) {
	body := kclmodtest.TarGz(map[string]string{"main.k": "a = 1\n"})
	var downloads atomic.Int64
	fail := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		downloads.Add(1)
		if fail {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	a := artifact(srv.URL+"/a.tar.gz", body)
	c := newCache(t, Options{})
	if err := c.Stage(context.Background(), "ns", a, filepath.Join(t.TempDir(), "1")); err == nil {
		t.Fatal("a failed download staged something")
	}
	fail = false
	if err := c.Stage(context.Background(), "ns", a, filepath.Join(t.TempDir(), "2")); err != nil {
		t.Fatalf("the failure was cached: %v", err)
	}
}

func TestEvictionKeepsStagedCopies(t *testing.T) {
	var downloads atomic.Int64
	one := kclmodtest.TarGz(map[string]string{"main.k": "a = 1\n"})
	two := kclmodtest.TarGz(map[string]string{"main.k": "a = 2\n"})
	c := newCache(t, Options{MaxBytes: 7}) // room for one tree
	stage := t.TempDir()
	if err := c.Stage(context.Background(), "ns", artifact(server(t, one, &downloads), one), filepath.Join(stage, "1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Stage(context.Background(), "ns", artifact(server(t, two, &downloads), two), filepath.Join(stage, "2")); err != nil {
		t.Fatal(err)
	}
	if c.Len() != 1 {
		t.Fatalf("%d trees kept over the size bound", c.Len())
	}
	if got := read(t, filepath.Join(stage, "1", "main.k")); got != "a = 1\n" {
		t.Fatalf("eviction removed a staged copy: %q", got)
	}
}

// Renders of a namespace read one tree in place, in that namespace's directory; it outlives the
// size bound while in use and goes once released.
func TestUseSharesATreeInTheNamespaceDirectory(t *testing.T) {
	var downloads atomic.Int64
	one := kclmodtest.TarGz(map[string]string{"main.k": "a = 1\n"})
	two := kclmodtest.TarGz(map[string]string{"main.k": "a = 2\n"})
	c := newCache(t, Options{MaxBytes: 7}) // room for one tree
	a := artifact(server(t, one, &downloads), one)
	dir1, release1, err := c.Use(context.Background(), "team-a", a)
	if err != nil {
		t.Fatal(err)
	}
	dir2, release2, err := c.Use(context.Background(), "team-a", a)
	if err != nil {
		t.Fatal(err)
	}
	nsDir, _ := c.opts.DirFor("team-a")
	if dir1 != dir2 || filepath.Dir(dir1) != nsDir || downloads.Load() != 1 {
		t.Fatalf("want one download shared in %s: %s, %s, %d downloads", nsDir, dir1, dir2, downloads.Load())
	}
	release1()
	release1() // a second call is harmless
	if _, _, err := c.Use(context.Background(), "team-a", artifact(server(t, two, &downloads), two)); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(dir1, "main.k")); got != "a = 1\n" {
		t.Fatalf("a tree in use was evicted: %q", got)
	}
	release2()
	if _, _, err := c.Use(context.Background(), "team-a", artifact(server(t, two, &downloads), two)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir1); !os.IsNotExist(err) {
		t.Fatalf("the released tree stayed over the size bound: %v", err)
	}
}
