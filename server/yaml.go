package server

import (
	"errors"
	"net/http"
	"os"
	"strconv"

	"github.com/kcl-flux/kcl-artifact-controller/internal/tarball"
)

// serveYAML writes the YAML files of a tar.gz archive, in name order, as one stream. A first
// read of the archive looks at the headers (and the first bytes of each YAML file) only, so
// that everything that can be refused is refused before the reply starts; the following reads
// copy the files to the client, never holding more than a buffer of them.
// Every read goes through the one open file f: the name may be collected meanwhile.
func serveYAML(w http.ResponseWriter, r *http.Request, f *os.File) {
	y, err := tarball.ScanYAML(f)
	switch {
	case errors.Is(err, tarball.ErrYAMLTooLarge), errors.Is(err, tarball.ErrYAMLUnsorted):
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	case err != nil:
		http.Error(w, "cannot read the artifact", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	// The length lets a client tell a reply cut short (a failed read, a write timeout) from a
	// whole one, now that the reply starts before the archive has been read to the end.
	w.Header().Set("Content-Length", strconv.FormatInt(y.Len(), 10))
	if r.Method == http.MethodHead {
		return
	}
	// An error here comes after the headers: the connection closes short of Content-Length.
	_ = y.CopyTo(w)
}
