// Package ui is the browser view of the artifacts this instance serves: a list of its
// KCLArtifacts and, for each, the objects and rendered YAML of its kept artifacts, their history
// and the diff between any two of them. Pages are rendered on the server with html/template and
// need no external asset and no script: clusters are often offline, and the view is reached
// through `kubectl port-forward`. It only reads: GET and HEAD.
package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/server"
)

// Defaults of Options.
const (
	DefaultMaxYAML  = 16 << 20
	DefaultMaxPages = 4
)

const (
	// busyWait is how long a page waits for a slot (Options.MaxPages) before answering 503.
	busyWait = 10 * time.Second
	// writeTimeout bounds the time to send one page; pages are generated in memory first, so
	// this is only about slow clients.
	writeTimeout = 2 * time.Minute
)

// Options configure the view.
type Options struct {
	// Reader reads KCLArtifacts: the manager's cache, so pages cost the API server nothing.
	Reader client.Reader
	// StorageRoot is the artifact storage directory (--storage-path). Only KCLArtifacts whose
	// directory exists there are shown: another instance (a shard) serves the others.
	StorageRoot string
	// Store, when set, is the artifact store of StorageRoot: archives are read only once it
	// verified them (artifactstore.Store.Open).
	Store *artifactstore.Store
	// ShowSecrets shows the values of Secrets; by default their keys show and values do not.
	ShowSecrets bool
	// MaxYAML bounds the YAML of one artifact that a page shows or compares (DefaultMaxYAML
	// when 0); larger artifacts are refused with a message, since a page holds it in memory.
	MaxYAML int64
	// MaxPages bounds the artifact pages built at once (DefaultMaxPages when 0): each one may
	// decompress, parse and compare several artifacts of up to MaxYAML.
	MaxPages int
	// Log receives failures to read storage or the cache.
	Log logr.Logger
	// Sensitive returns the values a KCLArtifact reads from Secrets: masked wherever they appear
	// unless ShowSecrets.
	Sensitive arguments.SensitiveFunc
}

type handler struct {
	reader      client.Reader
	root        string
	store       *artifactstore.Store
	showSecrets bool
	maxYAML     int64
	pages       chan struct{} // one token per artifact page being built
	log         logr.Logger
	sensitive   arguments.SensitiveFunc
}

// New returns the view's handler.
func New(o Options) (http.Handler, error) {
	if o.Reader == nil {
		return nil, errors.New("ui: a Reader is required")
	}
	if o.StorageRoot == "" {
		return nil, errors.New("ui: a StorageRoot is required")
	}
	root, err := filepath.Abs(o.StorageRoot)
	if err != nil {
		return nil, err
	}
	// Storage may sit behind a link (a volume mount); paths are compared once resolved.
	if real, err := filepath.EvalSymlinks(root); err == nil {
		root = real
	}
	if o.MaxYAML <= 0 {
		o.MaxYAML = DefaultMaxYAML
	}
	if o.MaxPages <= 0 {
		o.MaxPages = DefaultMaxPages
	}
	h := &handler{reader: o.Reader, root: root, store: o.Store, showSecrets: o.ShowSecrets, maxYAML: o.MaxYAML,
		pages: make(chan struct{}, o.MaxPages), log: o.Log, sensitive: o.Sensitive}
	return h.routes(), nil
}

func (h *handler) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.serveIndex)
	mux.HandleFunc("GET /kclartifact/{ns}/{name}", h.redirectToPage)
	mux.HandleFunc("GET /kclartifact/{ns}/{name}/{$}", h.serveArtifact)
	mux.HandleFunc("GET /kclartifact/{ns}/{name}/{file}", h.serveDownload)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.errorPage(w, http.StatusNotFound, "Not found", "There is no page at "+r.URL.Path+".")
	})
	return h.guard(mux)
}

// csp forbids every script, frame and remote resource: pages show untrusted YAML and KCL error
// messages, and should escaping ever fail, nothing they hold can run or load.
const csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// guard sets the security headers of every answer and turns away anything but GET and HEAD.
func (h *handler) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", csp)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("Referrer-Policy", "no-referrer")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			hd.Set("Allow", "GET, HEAD")
			h.errorPage(w, http.StatusMethodNotAllowed, "Method not allowed", "This view only reads: GET and HEAD.")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// acquire takes a page slot, waiting a little: a person reloading is better served late than
// refused, but requests must not pile up without bound.
func (h *handler) acquire(r *http.Request) bool {
	t := time.NewTimer(busyWait)
	defer t.Stop()
	select {
	case h.pages <- struct{}{}:
		return true
	case <-r.Context().Done():
		return false
	case <-t.C:
		return false
	}
}

func (h *handler) release() { <-h.pages }

// Start serves h on addr until ctx ends.
func Start(ctx context.Context, addr string, h http.Handler) error {
	srv := &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// Bodies are never read (GET and HEAD only); as in the artifact server, the read
		// deadline stays armed while the reply is written, so it is not shorter than the write's.
		ReadTimeout:    writeTimeout,
		WriteTimeout:   writeTimeout,
		IdleTimeout:    time.Minute,
		MaxHeaderBytes: 16 << 10,
	}
	if err := server.Serve(ctx, srv); err != nil {
		return fmt.Errorf("ui: %w", err)
	}
	return nil
}
