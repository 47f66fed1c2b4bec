package artifactstore

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"path"
	"sync"

	"github.com/fluxcd/pkg/artifact/storage"
)

// gzipWriters are reused: a fresh gzip.Writer allocates its compressor's tables (close to a
// megabyte), which a thousand renders turn into the controller's main source of garbage.
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(io.Discard) }}

// entry is one file of an archive.
type entry struct {
	name string
	r    io.Reader
	size int64
}

// writeTarGz writes the tarball Flux's Storage.Archive makes of a directory holding only the
// entries' files (and their directories): the same bytes, so the digest of an artifact does not
// depend on which of the two wrote it (TestArchiveMatchesFluxStorage keeps them in step). It needs
// no directory to walk and no file to open for each render. Entries must be in name order.
func writeTarGz(w io.Writer, entries ...entry) error {
	gw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(gw)
	gw.Reset(w)
	tw := tar.NewWriter(gw)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: ".", Mode: storage.DefaultDirMode}); err != nil {
		return err
	}
	dirs := map[string]bool{".": true}
	for _, e := range entries {
		// Storage.Archive walks the tree: a directory comes before its files, a parent before it
		if err := writeDirs(tw, dirs, path.Dir(e.name)); err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: storage.DefaultFileMode, Size: e.size}); err != nil {
			return err
		}
		if _, err := io.Copy(tw, e.r); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gw.Close()
}

// writeDirs writes the headers of d and its parents not written yet.
func writeDirs(tw *tar.Writer, written map[string]bool, d string) error {
	if written[d] {
		return nil
	}
	if err := writeDirs(tw, written, path.Dir(d)); err != nil {
		return err
	}
	written[d] = true
	return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: storage.DefaultDirMode})
}
