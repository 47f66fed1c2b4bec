// Package tarball reads the tar.gz archives of the artifact store: one file of an archive, or
// its YAML files in name order as one stream, within bounds that are checked on the headers
// before any content is held. The controller reads kept artifacts with it, the artifact server
// and the browser view show and compare their YAML.
package tarball

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"sync"
)

const (
	// maxYAMLView bounds the YAML that one view sends from one archive.
	maxYAMLView = 64 << 20
	// maxYAMLPasses bounds the reads of one archive: a gzip stream cannot seek, so every run of
	// YAML files stored out of name order costs another decompression from the start. Archives
	// of the artifact store take one or a few (it stores files in directory walk order).
	maxYAMLPasses = 32
	// copyBufferSize is the buffer of the copy from the archive to the client.
	copyBufferSize = 32 << 10
)

var (
	// ErrYAMLTooLarge is an archive holding more YAML than any view sends (maxYAMLView),
	// whatever limit the caller asked for.
	ErrYAMLTooLarge = fmt.Errorf("the archive's YAML is larger than the %d MiB the YAML view shows; download the .tar.gz instead", maxYAMLView>>20)
	// ErrYAMLUnsorted is an archive whose YAML files would take too many reads to stream in
	// name order (maxYAMLPasses).
	ErrYAMLUnsorted = errors.New("the archive's YAML files are too far out of name order to show; download the .tar.gz instead")
	errStopPass     = errors.New("stop reading the archive")
)

// yamlFile is one YAML file of an archive, as the first read of the archive saw it.
type yamlFile struct {
	name  string
	index int // among all the archive's entries
	size  int64
	// dashes tells the file starts with "---", so it separates itself from the one before.
	dashes bool
}

// isYAML tells whether an entry is YAML a deploy applies: the rollback phases of an artifact
// (rollbackDir) repeat or add hooks applied only when it is rolled back to, and are not shown.
func isYAML(hdr *tar.Header) bool {
	ext := path.Ext(hdr.Name)
	return hdr.Typeflag == tar.TypeReg && (ext == ".yaml" || ext == ".yml") && !strings.HasPrefix(hdr.Name, rollbackDir)
}

// rollbackDir holds the phases an artifact applies when it is rolled back to, when they differ
// from those of a deploy (internal/phases).
const rollbackDir = "rollback/"

// ReadFile returns the content of the regular file name of a tar.gz archive already open (a
// file Store.Open verified); found is false when it has none. A file of more than limit bytes
// is refused (ErrTooLarge).
func ReadFile(f io.ReadSeeker, name string, limit int64) (content []byte, found bool, err error) {
	err = eachEntry(f, func(_ int, hdr *tar.Header, tr io.Reader) error {
		if hdr.Typeflag != tar.TypeReg || hdr.Name != name {
			return nil
		}
		if hdr.Size > limit {
			return fmt.Errorf("%w: %s is %d bytes, the bound is %d", ErrTooLarge, name, hdr.Size, limit)
		}
		found = true
		content, err = io.ReadAll(io.LimitReader(tr, limit))
		if err == nil {
			err = errStopPass
		}
		return err
	})
	if errors.Is(err, errStopPass) {
		err = nil
	}
	return content, found, err
}

// YAML is the YAML files of an archive in name order, as the first read of the archive saw them:
// the stream ReadYAML returns and the artifact server's YAML view sends.
type YAML struct {
	f     io.ReadSeeker
	files []yamlFile
}

// ScanYAML lists the YAML files of the archive f in name order, reading the headers (and the
// first bytes of each YAML file) only; of files with the same name, the last one wins. It stops
// as soon as the sizes add up to more than the view sends (ErrYAMLTooLarge), and refuses files
// too far out of name order (ErrYAMLUnsorted). Every later read of the YAML goes through f.
func ScanYAML(f io.ReadSeeker) (*YAML, error) {
	byName := map[string]yamlFile{}
	var total int64
	err := eachEntry(f, func(i int, hdr *tar.Header, tr io.Reader) error {
		if !isYAML(hdr) {
			return nil
		}
		if total += hdr.Size; total > maxYAMLView {
			return ErrYAMLTooLarge
		}
		var head [3]byte
		n := min(hdr.Size, int64(len(head)))
		if _, err := io.ReadFull(tr, head[:n]); err != nil {
			return err
		}
		byName[hdr.Name] = yamlFile{name: hdr.Name, index: i, size: hdr.Size, dashes: string(head[:n]) == "---"}
		return nil
	})
	if err != nil {
		return nil, err
	}
	files := make([]yamlFile, 0, len(byName))
	for _, y := range byName {
		files = append(files, y)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	if passes(files) > maxYAMLPasses {
		return nil, ErrYAMLUnsorted
	}
	return &YAML{f: f, files: files}, nil
}

// passes counts the reads of the archive that writing files in order takes: one more every
// time the next file lies before the previous one in the archive.
func passes(files []yamlFile) int {
	n := 1
	for i := 1; i < len(files); i++ {
		if files[i].index < files[i-1].index {
			n++
		}
	}
	return n
}

// Len is the size of what CopyTo writes.
func (s *YAML) Len() int64 {
	var n int64
	for i, y := range s.files {
		if i > 0 && !y.dashes {
			n += int64(len("---\n"))
		}
		n += y.size
	}
	return n
}

// CopyTo copies the YAML files to w, reading the archive once more for each run of files stored
// in name order.
func (s *YAML) CopyTo(w io.Writer) error {
	f, files := s.f, s.files
	buf := make([]byte, copyBufferSize)
	next := 0
	for next < len(files) {
		start := next
		err := eachEntry(f, func(i int, hdr *tar.Header, tr io.Reader) error {
			y := files[next]
			if i < y.index {
				return nil
			}
			if i > y.index || hdr.Name != y.name || hdr.Size != y.size {
				return fmt.Errorf("archive entry %d is not %s as on the first read", i, y.name)
			}
			if err := writeFile(w, tr, y, next > 0, buf); err != nil {
				return err
			}
			if next++; next == len(files) || files[next].index < i {
				return errStopPass
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopPass) {
			return err
		}
		if next == start {
			return fmt.Errorf("archive entry %s not found", files[next].name)
		}
	}
	return nil
}

// writeFile copies one file, never more than the size the first read saw: that bounds the
// whole view to what ScanYAML accepted.
func writeFile(w io.Writer, r io.Reader, y yamlFile, separate bool, buf []byte) error {
	if separate && !y.dashes {
		if _, err := io.WriteString(w, "---\n"); err != nil {
			return err
		}
	}
	n, err := io.CopyBuffer(w, io.LimitReader(r, y.size), buf)
	if err == nil && n != y.size {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// eachEntry reads the archive from the start, calling fn with each entry's position, header and
// content until fn fails (errStopPass ends the read early) or the archive ends.
func eachEntry(f io.ReadSeeker, fn func(i int, hdr *tar.Header, content io.Reader) error) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	gz, err := gunzip(f)
	if err != nil {
		return err
	}
	defer gzipReaders.Put(gz)
	tr := tar.NewReader(gz)
	for i := 0; ; i++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(i, hdr, tr); err != nil {
			return err
		}
	}
}

// gzipReaders keeps readers between archives: each new one allocates a 32 KiB window, and every
// new artifact's event reads two archives twice.
var gzipReaders sync.Pool

func gunzip(r io.Reader) (*gzip.Reader, error) {
	if gz, ok := gzipReaders.Get().(*gzip.Reader); ok {
		if err := gz.Reset(r); err != nil {
			gzipReaders.Put(gz)
			return nil, err
		}
		return gz, nil
	}
	return gzip.NewReader(r)
}

// ErrTooLarge is an archive whose YAML is larger than asked for.
var ErrTooLarge = errors.New("the artifact's YAML is too large to compare")

// ReadYAML returns the YAML files of a tar.gz archive already open (a file Store.Open
// verified), in name order, as one stream, refusing (ErrTooLarge) archives holding more than
// limit bytes of it before reading them.
func ReadYAML(f io.ReadSeeker, limit int64) ([]byte, error) {
	y, err := ScanYAML(f)
	if err != nil {
		return nil, err
	}
	n := y.Len()
	if n > limit {
		return nil, fmt.Errorf("%w: %d bytes, the bound is %d", ErrTooLarge, n, limit)
	}
	var b bytes.Buffer
	b.Grow(int(n))
	if err := y.CopyTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
