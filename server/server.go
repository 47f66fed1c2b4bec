// Package server is the HTTP artifact server: it serves the artifact store to
// kustomize-controller and to people. It answers /kclartifact/<namespace>/<name>/<file> only
// with the object's token (artifactstore.Store.Token, in the query of the URLs the controller
// publishes), and only with bytes the store verified to be those it wrote (Store.Open): never
// a link, a directory listing, a file the store did not write, or damaged bytes. `NAME.yaml`
// beside an archive `NAME.tar.gz` shows the archive's YAML as plain text, so `.../latest.yaml`
// is the current rendered output of a KCLArtifact at a stable URL.
package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
)

// Defaults of Options.
const (
	DefaultMaxYAMLViews = 8
	DefaultWriteTimeout = 2 * time.Minute
)

// Options tune the server; a zero field takes its default.
type Options struct {
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
	// Waiting returns a stage's artifacts waiting to be published: a diff compares one with
	// what runs when asked by digest, never by default.
	Waiting HistoryFunc
	// Sensitive returns the values a KCLArtifact reads from Secrets: diffs mask them wherever
	// they appear unless ShowSecrets. Without it, only Secret objects are masked.
	Sensitive arguments.SensitiveFunc
}

// HistoryFunc returns the kept artifacts of the KCLArtifact namespace/name, newest first.
type HistoryFunc func(ctx context.Context, namespace, name string) ([]kclv1.ArtifactHistoryEntry, error)

// HistoryFrom reads status.history through r, the controller's cache: the index is the object's
// status, not a file written beside the artifacts at every publish.
func HistoryFrom(r client.Reader) HistoryFunc {
	return statusFrom(r, func(obj *kclv1.KCLArtifact) []kclv1.ArtifactHistoryEntry { return obj.Status.History })
}

// WaitingFrom reads a stage's status.promotion.waiting through r, as history entries.
func WaitingFrom(r client.Reader) HistoryFunc {
	return statusFrom(r, func(obj *kclv1.KCLArtifact) []kclv1.ArtifactHistoryEntry {
		var waiting []kclv1.ArtifactHistoryEntry
		if p := obj.Status.Promotion; p != nil {
			for _, w := range p.Waiting {
				waiting = append(waiting, w.Entry())
			}
		}
		return waiting
	})
}

// statusFrom reads the KCLArtifact namespace/name through r and picks entries of its status.
func statusFrom(r client.Reader, pick func(*kclv1.KCLArtifact) []kclv1.ArtifactHistoryEntry) HistoryFunc {
	return func(ctx context.Context, namespace, name string) ([]kclv1.ArtifactHistoryEntry, error) {
		obj := &kclv1.KCLArtifact{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
			return nil, err
		}
		return pick(obj), nil
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

// HandlerWithOptions serves store.
func HandlerWithOptions(store *artifactstore.Store, o Options) (http.Handler, error) {
	if store == nil {
		return nil, errors.New("the artifact server needs the artifact store")
	}
	o = o.withDefaults()
	return &handler{store: store, views: make(chan struct{}, o.MaxYAMLViews), maxDiff: o.MaxDiffYAML,
		showSecrets: o.ShowSecrets, history: o.History, waiting: o.Waiting, sensitive: o.Sensitive}, nil
}

type handler struct {
	store       *artifactstore.Store
	views       chan struct{} // one token per YAML view or diff in progress
	maxDiff     int64
	showSecrets bool
	history     HistoryFunc
	waiting     HistoryFunc
	sensitive   arguments.SensitiveFunc
}

// objectFile is /kclartifact/<namespace>/<name>/<file>, the only URLs the server answers.
var objectFile = regexp.MustCompile(`^/kclartifact/([a-z0-9][a-z0-9.-]*)/([a-z0-9][a-z0-9.-]*)/([^/]+)$`)

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	m := objectFile.FindStringSubmatch(path.Clean("/" + r.URL.Path))
	// Without the object's token, nothing says whether the object or the file exists.
	if m == nil || !h.store.ValidToken(m[1], m[2], r.URL.Query().Get(artifactstore.TokenParam)) {
		http.NotFound(w, r)
		return
	}
	ns, name, file := m[1], m[2], m[3]
	switch {
	case file == "diff":
		h.serveDiff(w, r, ns, name)
	case strings.HasSuffix(file, ".yaml"):
		if f, _, ok := h.open(w, ns, name, strings.TrimSuffix(file, ".yaml")+".tar.gz"); ok {
			defer f.Close()
			h.serveYAMLView(w, r, f)
		}
	default:
		if f, fi, ok := h.open(w, ns, name, file); ok {
			defer f.Close()
			http.ServeContent(w, r, file, fi.ModTime(), f)
		}
	}
}

// open opens a verified artifact file, or answers why there is none: 404 and the reason for a
// missing, damaged or not regular file.
func (h *handler) open(w http.ResponseWriter, ns, name, file string) (*os.File, os.FileInfo, bool) {
	f, fi, err := h.store.Open(ns, name, file)
	if err == nil {
		return f, fi, true
	}
	if notServed(err) {
		http.Error(w, fmt.Sprintf("artifact %s/%s/%s: %v", ns, name, file, err), http.StatusNotFound)
	} else {
		http.Error(w, "cannot read the artifact", http.StatusInternalServerError)
	}
	return nil, nil, false
}

// notServed tells an artifact the store does not serve from a failure to read one.
func notServed(err error) bool {
	return errors.Is(err, artifactstore.ErrMissing) || errors.Is(err, artifactstore.ErrDamaged) || errors.Is(err, artifactstore.ErrNotAFile)
}

// serveYAMLView turns the request away at once when every slot is busy: queueing would let
// slow clients pile up goroutines and open archives without bound.
func (h *handler) serveYAMLView(w http.ResponseWriter, r *http.Request, archive *os.File) {
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

// StartWithOptions serves store on addr until ctx ends.
func StartWithOptions(ctx context.Context, addr string, store *artifactstore.Store, o Options) error {
	h, err := HandlerWithOptions(store, o)
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
