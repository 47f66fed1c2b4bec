package kclmodtest

import (
	"bytes"
	"crypto/subtle"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// GitServer serves bare repositories over HTTP on 127.0.0.1 with `git http-backend` (the smart
// protocol go-git needs), at URL(name). Repositories are made with the git CLI.
type GitServer struct {
	Root   string
	Server *httptest.Server
	// Username and Password, or Token (bearer), when set, are required for every request.
	Username, Password, Token string

	t       testing.TB
	mu      sync.Mutex
	env     []string
	fetches atomic.Int64
	conns   atomic.Int64
	authed  atomic.Int64
}

// StartGitServer starts a Git server over a new temporary directory; it is stopped when the
// test ends.
func StartGitServer(t testing.TB) *GitServer {
	t.Helper()
	return startGitServer(t, false)
}

// StartTLSGitServer is StartGitServer over https, with a certificate (for 127.0.0.1) that only
// CACert vouches for.
func StartTLSGitServer(t testing.TB) *GitServer {
	t.Helper()
	return startGitServer(t, true)
}

func startGitServer(t testing.TB, tls bool) *GitServer {
	t.Helper()
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v (is git installed?)", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	g := &GitServer{Root: t.TempDir(), t: t}
	home := t.TempDir()
	g.env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull, "GIT_TERMINAL_PROMPT=0", "HOME=" + home}
	h := &cgi.Handler{
		Path:       backend,
		Root:       "/",
		Dir:        g.Root,
		Env:        append([]string{"GIT_PROJECT_ROOT=" + g.Root, "GIT_HTTP_EXPORT_ALL=1"}, g.env...),
		InheritEnv: []string{"PATH"},
	}
	g.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			g.authed.Add(1)
		}
		if !g.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="kclmodtest"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
			g.fetches.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	g.Server.Config.ConnState = countNewConns(&g.conns)
	if tls {
		// clients refusing the certificate are what TLS tests are about, not server errors
		g.Server.Config.ErrorLog = log.New(io.Discard, "", 0)
		g.Server.StartTLS()
	} else {
		g.Server.Start()
	}
	t.Cleanup(g.Server.Close)
	return g
}

// countNewConns is an http.Server ConnState counting the connections accepted.
func countNewConns(n *atomic.Int64) func(net.Conn, http.ConnState) {
	return func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
}

// Conns counts the TCP connections the server accepted so far.
func (g *GitServer) Conns() int64 { return g.conns.Load() }

// AuthorizationHeaders counts the requests that carried an Authorization header, whether
// the server required one or not.
func (g *GitServer) AuthorizationHeaders() int64 { return g.authed.Load() }

func (g *GitServer) authorized(r *http.Request) bool {
	eq := func(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
	switch {
	case g.Token != "":
		return eq(r.Header.Get("Authorization"), "Bearer "+g.Token)
	case g.Username != "":
		u, p, ok := r.BasicAuth()
		return ok && eq(u, g.Username) && eq(p, g.Password)
	}
	return true
}

// Fetches counts the fetches (git-upload-pack POSTs) so far; ls-remote does not count.
func (g *GitServer) Fetches() int64 { return g.fetches.Load() }

// Host is 127.0.0.1:<port>.
func (g *GitServer) Host() string {
	return strings.TrimPrefix(strings.TrimPrefix(g.Server.URL, "http://"), "https://")
}

// CACert is the PEM certificate a client must trust to reach a TLS server (it is
// self-signed), as a Secret's ca.crt holds it.
func (g *GitServer) CACert() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: g.Server.Certificate().Raw})
}

// URL is the clone URL of repository name.
func (g *GitServer) URL(name string) string { return g.Server.URL + "/" + name + ".git" }

// CreateRepo creates repository name whose first commit on main holds the files of dir, and
// returns the commit.
func (g *GitServer) CreateRepo(name, dir string) string {
	g.t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	bare := filepath.Join(g.Root, name+".git")
	g.git("", "init", "--quiet", "--bare", "--initial-branch=main", bare)
	work := filepath.Join(g.Root, "work-"+name)
	g.git("", "init", "--quiet", "--initial-branch=main", work)
	g.git(work, "remote", "add", "origin", bare)
	g.git("", "-c", "core.fsync=none", "--work-tree="+dir, "--git-dir="+filepath.Join(work, ".git"), "add", "--all", ".")
	return g.commit(work, "initial")
}

// Commit replaces files (path -> content; "" removes) in repository name, commits to main and
// returns the commit.
func (g *GitServer) Commit(name string, files map[string]string) string {
	g.t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	work := filepath.Join(g.Root, "work-"+name)
	g.git(work, "checkout", "--quiet", "-f", "main")
	for rel, content := range files {
		p := filepath.Join(work, filepath.FromSlash(rel))
		if content == "" {
			_ = os.Remove(p)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			g.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			g.t.Fatal(err)
		}
	}
	g.git(work, "add", "--all")
	return g.commit(work, "change")
}

// Tag creates the annotated tag on main of repository name and returns the tagged commit.
func (g *GitServer) Tag(name, tag string) string {
	g.t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	work := filepath.Join(g.Root, "work-"+name)
	g.git(work, "-c", "user.name=kclmodtest", "-c", "user.email=kclmodtest@example.invalid", "tag", "-a", "-m", tag, tag, "main")
	g.git(work, "push", "--quiet", "origin", "refs/tags/"+tag)
	return strings.TrimSpace(g.git(work, "rev-parse", tag+"^{commit}"))
}

func (g *GitServer) commit(work, msg string) string {
	g.git(work, "-c", "user.name=kclmodtest", "-c", "user.email=kclmodtest@example.invalid",
		"-c", "commit.gpgsign=false", "commit", "--quiet", "--allow-empty", "--no-verify", "-m", msg)
	g.git(work, "push", "--quiet", "origin", "HEAD:refs/heads/main")
	return strings.TrimSpace(g.git(work, "rev-parse", "HEAD"))
}

func (g *GitServer) git(dir string, args ...string) string {
	g.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), g.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		g.t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}
