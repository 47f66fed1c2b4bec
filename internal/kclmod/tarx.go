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
// maxFiles files and more than maxBytes bytes.
func extractTar(r io.Reader, dst string, maxBytes int64, maxFiles int) error {
	br := bufio.NewReader(r)
	var in io.Reader = br
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("reading the package archive: %w", err)
		}
		defer gz.Close()
		in = gz
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(in)
	var total int64
	files := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the package archive: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		if name == "." || name == "/" {
			continue
		}
		if path.IsAbs(name) || !filepath.IsLocal(filepath.FromSlash(name)) {
			return fmt.Errorf("the package archive has an unsafe path %q", hdr.Name)
		}
		target := filepath.Join(dst, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg, '\x00':
			files++
			if files > maxFiles {
				return fmt.Errorf("the package has more than %d files", maxFiles)
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			mode := os.FileMode(0o644)
			if hdr.Mode&0o111 != 0 {
				mode = 0o755
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
			if err != nil {
				return err
			}
			n, err := io.Copy(f, io.LimitReader(tr, maxBytes-total+1))
			total += n
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("reading the package archive: %w", err)
			}
			if total > maxBytes {
				return fmt.Errorf("the package is larger than %d bytes", maxBytes)
			}
		case tar.TypeXGlobalHeader:
		default:
			return fmt.Errorf("the package archive has %q of type %q: only directories and regular files are allowed", hdr.Name, string(hdr.Typeflag))
		}
	}
}

// checkTree refuses symlinks that leave root or point at directories (kcl's checksum cannot
// read them) and more than maxFiles files or maxBytes bytes.
func checkTree(root string, maxBytes int64, maxFiles int) error {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	var total int64
	files := 0
	return filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
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
			files++
			total += info.Size()
			if files > maxFiles {
				return fmt.Errorf("the package has more than %d files", maxFiles)
			}
			if total > maxBytes {
				return fmt.Errorf("the package is larger than %d bytes", maxBytes)
			}
		}
		return nil
	})
}
