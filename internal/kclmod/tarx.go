package kclmod

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// extractTar unpacks a KCL package tar (or tar.gz) into dst, refusing paths that leave dst,
// anything but directories and regular files (kpm's own untar accepts nothing else), more than
// maxEntries entries and more than maxBytes bytes. Every tar entry counts, and so does every
// directory an entry creates implicitly; extraction stops at the first entry past the bound.
func extractTar(r io.Reader, dst string, maxBytes int64, maxEntries int) error {
	in, closeIn, err := maybeGunzip(r)
	if err != nil {
		return err
	}
	defer closeIn()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	x := &extraction{dst: dst, tr: tar.NewReader(in), maxBytes: maxBytes, maxEntries: maxEntries, dirs: map[string]bool{".": true}}
	for {
		hdr, err := x.tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the package archive: %w", err)
		}
		if err := x.entry(hdr); err != nil {
			return err
		}
	}
}

func maybeGunzip(r io.Reader) (io.Reader, func(), error) {
	br := bufio.NewReader(r)
	if magic, err := br.Peek(2); err != nil || magic[0] != 0x1f || magic[1] != 0x8b {
		return br, func() {}, nil
	}
	gz, err := gzip.NewReader(br)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the package archive: %w", err)
	}
	return gz, func() { gz.Close() }, nil
}

// extraction is the state of one extractTar.
type extraction struct {
	dst        string
	tr         *tar.Reader
	maxBytes   int64
	maxEntries int
	entries    int
	total      int64
	dirs       map[string]bool // directories made so far, slash-separated, relative to dst
}

func (x *extraction) count(n int) error {
	if x.entries += n; x.entries > x.maxEntries {
		return fmt.Errorf("the package has more than %d files and directories", x.maxEntries)
	}
	return nil
}

func (x *extraction) entry(hdr *tar.Header) error {
	if err := x.count(1); err != nil {
		return err
	}
	name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
	if name == "." || name == "/" || hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	if path.IsAbs(name) || !filepath.IsLocal(filepath.FromSlash(name)) {
		return fmt.Errorf("the package archive has an unsafe path %q", hdr.Name)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.mkdir(name, true)
	case tar.TypeReg, '\x00':
		if err := x.mkdir(path.Dir(name), false); err != nil {
			return err
		}
		return x.file(name, hdr.Mode)
	}
	return fmt.Errorf("the package archive has %q of type %q: only directories and regular files are allowed", hdr.Name, string(hdr.Typeflag))
}

// mkdir makes dir and its missing parents, counting those made implicitly: one entry naming
// a deep path must not make thousands of directories for the price of one.
func (x *extraction) mkdir(dir string, named bool) error {
	missing := 0
	for d := dir; !x.dirs[d]; d = path.Dir(d) {
		missing++
	}
	if missing == 0 {
		return nil
	}
	if named {
		missing-- // the archive's entry for dir was counted already
	}
	if err := x.count(missing); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(x.dst, filepath.FromSlash(dir)), 0o755); err != nil {
		return err
	}
	for d := dir; !x.dirs[d]; d = path.Dir(d) {
		x.dirs[d] = true
	}
	return nil
}

func (x *extraction) file(name string, hdrMode int64) error {
	mode := os.FileMode(0o644)
	if hdrMode&0o111 != 0 {
		mode = 0o755
	}
	f, err := os.OpenFile(filepath.Join(x.dst, filepath.FromSlash(name)), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(x.tr, x.maxBytes-x.total+1))
	x.total += n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("reading the package archive: %w", err)
	}
	if x.total > x.maxBytes {
		return fmt.Errorf("the package is larger than %d bytes", x.maxBytes)
	}
	return nil
}

// checkTree refuses symlinks that leave root or point at directories (kcl's checksum cannot
// read them), more than maxEntries entries (files, directories, symlinks) and more than maxBytes
// bytes.
func checkTree(root string, maxBytes int64, maxEntries int) error {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	var total int64
	entries := 0
	return filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		if entries++; entries > maxEntries {
			return fmt.Errorf("the package has more than %d files and directories", maxEntries)
		}
		if info.Mode()&os.ModeSymlink != 0 {
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				return fmt.Errorf("%s is a dangling symlink", filepath.ToSlash(rel))
			}
			if r, err := filepath.Rel(realRoot, real); err != nil || !filepath.IsLocal(r) {
				return fmt.Errorf("%s is a symlink leaving the package", filepath.ToSlash(rel))
			}
			if st, err := os.Stat(real); err != nil || st.IsDir() {
				return fmt.Errorf("%s is a symlink to a directory", filepath.ToSlash(rel))
			}
			return nil
		}
		if info.Mode().IsRegular() {
			total += info.Size()
			if total > maxBytes {
				return fmt.Errorf("the package is larger than %d bytes", maxBytes)
			}
		}
		return nil
	})
}
