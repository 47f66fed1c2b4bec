// Package server is the HTTP artifact server: it serves the storage directory to
// kustomize-controller and to people. Only regular files are served, never a directory listing
// or anything a path or link could reach outside storage; `NAME.yaml` beside an archive
// `NAME.tar.gz` shows the archive's YAML as plain text, so `.../latest.yaml` is the current
// rendered output of a KCLArtifact at a stable URL.
package server

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fstree"
)

// Defaults of Options.
const (
	DefaultMaxYAMLViews = 8
	DefaultWriteTimeout = 2 * time.Minute
)

// Options tune the server; a zero field takes its default.
type Options struct {
	// Store is the artifact store whose files are served.
	Store *artifactstore.Store
	// MaxYAMLViews bounds the YAML views served at once. Each one decompresses an archive and
	// holds its slot until the client has read the reply (or WriteTimeout ends it), so this
	// bounds the CPU and memory that clients can tie up. Requests over it get 503.
	MaxYAMLViews int
	// WriteTimeout bounds the time to send one reply, so a client that stops reading cannot
	// hold a connection forever; it must leave room for large archives on slow links.
	WriteTimeout time.Duration
	// MaxDiffYAML bounds the YAML of each side of a diff, which is held in memory.
	MaxDiffYAML int64
	// ShowSecrets shows Secret values in diffs instead of masking them.
	ShowSecrets bool
	// History returns a KCLArtifact's kept artifacts, newest first: its status.history, which
	// names the pair a diff compares. Without it, diffs are not served.
	History HistoryFunc
	// Sensitive returns the values a KCLArtifact reads from Secrets: diffs mask them wherever
	// they appear unless ShowSecrets. Without it, only Secret objects are masked.
	Sensitive arguments.SensitiveFunc
}

// HistoryFunc returns the kept artifacts of the KCLArtifact namespace/name, newest first.
type HistoryFunc func(ctx context.Context, namespace, name string) ([]kclv1.ArtifactHistoryEntry, error)

// HistoryFrom reads status.history through r, the controller's cache: the index is the object's
// status, not a file written beside the artifacts at every publish.
func HistoryFrom(r client.Reader) HistoryFunc {
	return func(ctx context.Context, namespace, name string) ([]kclv1.ArtifactHistoryEntry, error) {
		obj := &kclv1.KCLArtifact{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
			return nil, err
		}
		return obj.Status.History, nil
	}
}

// DefaultMaxDiffYAML is the default of Options.MaxDiffYAML.
const DefaultMaxDiffYAML = 16 << 20

func (o Options) withDefaults() Options {
	if o.MaxYAMLViews <= 0 {
		o.MaxYAMLViews = DefaultMaxYAMLViews
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxDiffYAML <= 0 {
		o.MaxDiffYAML = DefaultMaxDiffYAML
	}
	return o
}

// retryAfter is what a client turned away because every YAML view slot is busy should wait.
const retryAfter = 5 * time.Second

// Handler serves root with the default Options.
func Handler(root string) (http.Handler, error) {
	return HandlerWithOptions(root, Options{})
}

// HandlerWithOptions serves root.
func HandlerWithOptions(root string, o Options) (http.Handler, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	// Storage may itself sit behind a link (a volume mount); compare resolved paths.
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	o = o.withDefaults()
	return &handler{root: abs, views: make(chan struct{}, o.MaxYAMLViews), maxDiff: o.MaxDiffYAML,
		showSecrets: o.ShowSecrets, history: o.History, sensitive: o.Sensitive}, nil
}

type handler struct {
	root        string
	views       chan struct{} // one token per YAML view or diff in progress
	maxDiff     int64
	showSecrets bool
	history     HistoryFunc
	sensitive   arguments.SensitiveFunc
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rel := path.Clean("/" + r.URL.Path)
	if m := diffPath.FindStringSubmatch(rel); m != nil {
		h.serveDiff(w, r, m[1], m[2])
		return
	}
	if strings.HasSuffix(rel, ".yaml") {
		if archive, ok := h.resolve(strings.TrimSuffix(rel, ".yaml") + ".tar.gz"); ok {
			h.serveYAMLView(w, r, archive)
			return
		}
	}
	file, ok := h.resolve(rel)
	if !ok {
		http.NotFound(w, r)
		return
	}
	http.ServeFile(w, r, file)
}

// resolve maps a URL path to a regular file inside root, following links only within root.
func (h *handler) resolve(urlPath string) (string, bool) {
	p := filepath.Join(h.root, filepath.FromSlash(urlPath))
	real, err := filepath.EvalSymlinks(p)
	if err != nil || !fstree.Within(h.root, real) {
		return "", false
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	return real, true
}

// resolveDir maps a URL path to a directory inside root.
func (h *handler) resolveDir(urlPath string) (string, bool) {
	real, err := filepath.EvalSymlinks(filepath.Join(h.root, filepath.FromSlash(urlPath)))
	if err != nil || !fstree.Within(h.root, real) {
		return "", false
	}
	fi, err := os.Stat(real)
	return real, err == nil && fi.IsDir()
}

// rel is the URL path of a file under root.
func (h *handler) rel(p string) string {
	r, _ := filepath.Rel(h.root, p)
	return "/" + filepath.ToSlash(r)
}

// serveYAMLView turns the request away at once when every slot is busy: queueing would let
// slow clients pile up goroutines and open archives without bound.
func (h *handler) serveYAMLView(w http.ResponseWriter, r *http.Request, archive string) {
	select {
	case h.views <- struct{}{}:
		defer func() { <-h.views }()
	default:
		w.Header().Set("Retry-After", strconv.Itoa(int(retryAfter/time.Second)))
		http.Error(w, "too many YAML views in progress, retry later", http.StatusServiceUnavailable)
		return
	}
	serveYAML(w, r, archive)
}

// Start serves root on addr with the default Options until ctx ends.
func Start(ctx context.Context, addr, root string) error {
	return StartWithOptions(ctx, addr, root, Options{})
}

// StartWithOptions serves root on addr until ctx ends.
func StartWithOptions(ctx context.Context, addr, root string, o Options) error {
	h, err := HandlerWithOptions(root, o)
	if err != nil {
		return err
	}
	return Serve(ctx, newHTTPServer(addr, h, o))
}

// Serve runs srv until ctx ends, then shuts it down: replies still in flight after a grace
// period of 5s are cut rather than awaited.
func Serve(ctx context.Context, srv *http.Server) error {
	errCh := make(chan error, 1)
	go func() { errCh <- srv.ListenAndServe() }()
	select {
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(shutdown)
		if errors.Is(err, context.DeadlineExceeded) {
			err = srv.Close()
		}
		return err
	case err := <-errCh:
		return err
	}
}

func newHTTPServer(addr string, h http.Handler, o Options) *http.Server {
	o = o.withDefaults()
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// Once the headers are in, the server's read deadline stays armed while the reply is
		// written and, when it fires, cancels the request's context: shorter than WriteTimeout,
		// it would cut long downloads of large archives. Bodies are never read (GET and HEAD
		// only), so ReadHeaderTimeout is what stops slow requests.
		ReadTimeout:    o.WriteTimeout,
		WriteTimeout:   o.WriteTimeout,
		IdleTimeout:    time.Minute,
		MaxHeaderBytes: 16 << 10,
	}
}
