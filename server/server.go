// Package server is the HTTP artifact server: it serves the storage directory to
// kustomize-controller and to people. Only regular files are served, never a directory listing
// or anything a path or link could reach outside storage; `NAME.yaml` beside an archive
// `NAME.tar.gz` shows the archive's YAML as plain text, so `.../latest.yaml` is the current
// rendered output of a KCLArtifact at a stable URL.
package server

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Handler serves root.
func Handler(root string) (http.Handler, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	// Storage may itself sit behind a link (a volume mount); compare resolved paths.
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	return &handler{root: abs}, nil
}

type handler struct{ root string }

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rel := path.Clean("/" + r.URL.Path)
	if strings.HasSuffix(rel, ".yaml") {
		if archive, ok := h.resolve(strings.TrimSuffix(rel, ".yaml") + ".tar.gz"); ok {
			h.serveYAML(w, r, archive)
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
	if err != nil || !within(h.root, real) {
		return "", false
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.Mode().IsRegular() {
		return "", false
	}
	return real, true
}

func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// serveYAML writes the YAML files of a tar.gz archive, in name order, as one stream.
func (h *handler) serveYAML(w http.ResponseWriter, r *http.Request, archive string) {
	docs, err := yamlFiles(archive)
	if err != nil {
		http.Error(w, "cannot read the artifact", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	if r.Method == http.MethodHead {
		return
	}
	for i, d := range docs {
		if i > 0 && !strings.HasPrefix(string(d), "---") {
			io.WriteString(w, "---\n")
		}
		w.Write(d)
	}
}

// maxYAMLView bounds what the YAML view reads from one archive.
const maxYAMLView = 64 << 20

func yamlFiles(archive string) ([][]byte, error) {
	f, err := os.Open(archive)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		ext := path.Ext(hdr.Name)
		if hdr.Typeflag != tar.TypeReg || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		if total += hdr.Size; total > maxYAMLView {
			return nil, fmt.Errorf("archive %s is too large to show", archive)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[hdr.Name] = b
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	docs := make([][]byte, 0, len(names))
	for _, n := range names {
		docs = append(docs, files[n])
	}
	return docs, nil
}

// Start serves root on addr until ctx ends.
func Start(ctx context.Context, addr, root string) error {
	h, err := Handler(root)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.ListenAndServe() }()
	select {
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	case err := <-errCh:
		return err
	}
}
