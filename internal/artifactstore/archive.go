package artifactstore

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"sync"

	"github.com/fluxcd/pkg/artifact/storage"
)

// gzipWriters are reused: a fresh gzip.Writer allocates its compressor's tables (close to a
// megabyte), which a thousand renders turn into the controller's main source of garbage.
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(io.Discard) }}

// writeTarGz writes the tarball Flux's Storage.Archive makes of a directory holding only the
// file name with size bytes of content: the same bytes, so the digest of an artifact does not depend on which
// of the two wrote it (TestArchiveMatchesFluxStorage keeps them in step). It needs no directory
// to walk and no file to open for each render.
func writeTarGz(w io.Writer, name string, content io.Reader, size int64) error {
	gw := gzipWriters.Get().(*gzip.Writer)
	defer gzipWriters.Put(gw)
	gw.Reset(w)
	tw := tar.NewWriter(gw)
	headers := []*tar.Header{
		{Typeflag: tar.TypeDir, Name: ".", Mode: storage.DefaultDirMode},
		{Typeflag: tar.TypeReg, Name: name, Mode: storage.DefaultFileMode, Size: size},
	}
	for _, h := range headers {
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	if _, err := io.Copy(tw, content); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gw.Close()
}
