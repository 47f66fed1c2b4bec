package fluxenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultBranch is the branch of the repositories made by GitServer.
const DefaultBranch = "main"

// GitServer serves the bare repositories under Root over HTTP on 127.0.0.1 with
// `git http-backend` (the smart protocol, which go-git in source-controller needs), at
// URLBase/<name>.git. Repositories are created and changed with the git CLI through work
// clones under WorkDir.
type GitServer struct {
	Root    string // GIT_PROJECT_ROOT: holds <name>.git bare repositories
	WorkDir string // work clones used to commit
	URLBase string // http://127.0.0.1:<Port>
	Port    int
	LogPath string // request log and git-http-backend stderr

	mu      sync.Mutex // serialises git operations
	srv     *http.Server
	served  chan struct{}
	logFile *os.File
	gitEnv  []string
}

var repoNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// StartGitServer serves root (created if missing) on a free port of 127.0.0.1. workDir holds the
// work clones; logPath receives one line per request and git-http-backend's stderr.
func StartGitServer(root, workDir, logPath string) (*GitServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g, err := ServeGit(ln, root, workDir, logPath)
	if err != nil {
		ln.Close()
	}
	return g, err
}

// ServeGit is StartGitServer on a listener of the caller's (for instance one inside a node's
// network namespace, for Pods to clone from). The server closes ln when it stops.
func ServeGit(ln net.Listener, root, workDir, logPath string) (*GitServer, error) {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return nil, fmt.Errorf("git --exec-path: %w (is git installed?)", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		return nil, fmt.Errorf("git-http-backend not found: %w", err)
	}
	for _, d := range []string{root, workDir, filepath.Dir(logPath)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().(*net.TCPAddr)
	port := addr.Port
	// Neither the user's nor the system's git configuration may change what the tests see.
	gitEnv := []string{
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=" + os.DevNull,
		"GIT_TERMINAL_PROMPT=0",
		"HOME=" + workDir,
	}
	g := &GitServer{
		Root:    root,
		WorkDir: workDir,
		URLBase: "http://" + net.JoinHostPort(addr.IP.String(), strconv.Itoa(port)),
		Port:    port,
		LogPath: logPath,
		served:  make(chan struct{}),
		logFile: logFile,
		gitEnv:  gitEnv,
	}
	backendHandler := &cgi.Handler{
		Path:       backend,
		Root:       "/",
		Dir:        root,
		Env:        append([]string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}, gitEnv...),
		InheritEnv: []string{"PATH"},
		Stderr:     logFile,
	}
	g.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
			start := time.Now()
			backendHandler.ServeHTTP(rec, r)
			g.logf("%s %s %s -> %d (%s)", r.RemoteAddr, r.Method, r.URL.RequestURI(), rec.status,
				time.Since(start).Round(time.Millisecond))
		}),
		ReadHeaderTimeout: 30 * time.Second,
	}
	go func() {
		defer close(g.served)
		if err := g.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.logf("serve: %v", err)
		}
	}()
	return g, nil
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (g *GitServer) logf(format string, args ...any) {
	fmt.Fprintf(g.logFile, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
}

// Close stops the server, letting running requests finish for up to 10s.
func (g *GitServer) Close() error {
	if g == nil || g.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := g.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, g.srv.Close())
	}
	<-g.served
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(err, g.logFile.Close())
}

// URL returns the clone URL of repository name: URLBase/<name>.git.
func (g *GitServer) URL(name string) string {
	return g.URLBase + "/" + name + ".git"
}

// RepoPath returns the path of the bare repository name.
func (g *GitServer) RepoPath(name string) string {
	return filepath.Join(g.Root, name+".git")
}

// CreateRepo creates the bare repository <name>.git whose first commit on DefaultBranch holds
// the contents of dir (recursively; a .git directory in it is skipped). It returns the commit SHA.
func (g *GitServer) CreateRepo(name, dir string) (string, error) {
	if !repoNameRE.MatchString(name) {
		return "", fmt.Errorf("invalid repository name %q", name)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	bare := g.RepoPath(name)
	if _, err := os.Stat(bare); err == nil {
		return "", fmt.Errorf("repository %s already exists", bare)
	}
	if _, err := g.git("", "init", "--quiet", "--bare", "--initial-branch="+DefaultBranch, bare); err != nil {
		return "", err
	}
	work := g.workClone(name)
	if err := os.RemoveAll(work); err != nil {
		return "", err
	}
	if _, err := g.git("", "init", "--quiet", "--initial-branch="+DefaultBranch, work); err != nil {
		return "", err
	}
	if _, err := g.git(work, "remote", "add", "origin", bare); err != nil {
		return "", err
	}
	if err := copyTree(dir, work); err != nil {
		return "", err
	}
	return g.commitAndPush(work, "Initial commit from "+filepath.Base(dir))
}

// Commit lets change modify the work tree of repository name (a clone of DefaultBranch), then
// commits everything (additions, changes and deletions) with message, pushes it and returns the
// new commit SHA. A commit is made even if nothing changed.
func (g *GitServer) Commit(name, message string, change func(worktree string) error) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	work := g.workClone(name)
	if _, err := os.Stat(g.RepoPath(name)); err != nil {
		return "", fmt.Errorf("no repository %s: %w", name, err)
	}
	if _, err := os.Stat(filepath.Join(work, ".git")); err != nil {
		if _, err := g.git("", "clone", "--quiet", "--branch", DefaultBranch, g.RepoPath(name), work); err != nil {
			return "", err
		}
	} else {
		// the bare repository may have been changed by someone else: start from its head
		if _, err := g.git(work, "fetch", "--quiet", "origin", DefaultBranch); err != nil {
			return "", err
		}
		if _, err := g.git(work, "reset", "--quiet", "--hard", "FETCH_HEAD"); err != nil {
			return "", err
		}
		if _, err := g.git(work, "clean", "--quiet", "-fdx"); err != nil {
			return "", err
		}
	}
	if err := change(work); err != nil {
		return "", fmt.Errorf("changing %s: %w", name, err)
	}
	return g.commitAndPush(work, message)
}

// CommitFiles writes files (path relative to the repository root -> content), removes the paths
// in remove, and commits.
func (g *GitServer) CommitFiles(name, message string, files map[string]string, remove ...string) (string, error) {
	return g.Commit(name, message, func(work string) error {
		for rel, content := range files {
			p, err := inside(work, rel)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				return err
			}
		}
		for _, rel := range remove {
			p, err := inside(work, rel)
			if err != nil {
				return err
			}
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		}
		return nil
	})
}

// Head returns the commit SHA of DefaultBranch in repository name.
func (g *GitServer) Head(name string) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	out, err := g.git(g.RepoPath(name), "rev-parse", "refs/heads/"+DefaultBranch)
	return strings.TrimSpace(out), err
}

func (g *GitServer) workClone(name string) string {
	return filepath.Join(g.WorkDir, name)
}

func (g *GitServer) commitAndPush(work, message string) (string, error) {
	if _, err := g.git(work, "add", "--all"); err != nil {
		return "", err
	}
	if _, err := g.git(work, "-c", "user.name=fluxenv", "-c", "user.email=fluxenv@example.invalid",
		"-c", "commit.gpgsign=false", "commit", "--quiet", "--allow-empty", "--no-verify", "-m", message); err != nil {
		return "", err
	}
	if _, err := g.git(work, "push", "--quiet", "origin", "HEAD:refs/heads/"+DefaultBranch); err != nil {
		return "", err
	}
	out, err := g.git(work, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(out), nil
}

// git runs the git CLI in dir ("" = current directory) and returns its stdout.
func (g *GitServer) git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), g.gitEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// inside joins rel to root and refuses paths that leave root.
func inside(root, rel string) (string, error) {
	if filepath.IsAbs(rel) || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("path %q is not inside the repository", rel)
	}
	return filepath.Join(root, rel), nil
}

// copyTree copies the regular files, directories and symlinks of src into dst (merging with
// what is there), skipping .git.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" && rel != "." {
			return filepath.SkipDir
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case info.Mode()&os.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case info.Mode().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		default:
			return nil // sockets, devices: not repository content
		}
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm|0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
