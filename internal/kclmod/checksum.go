package kclmod

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// checksumIgnores are the substrings kpm's HashDir skips paths by.
var checksumIgnores = []string{".git", ".tar"}

// Checksum computes kcl's package checksum of dir, the `sum` of kcl.mod.lock: the sha256 of the
// contents of its files, concatenated in filepath.Walk order, skipping every path that contains
// ".git" or ".tar", in standard base64. See the package documentation for where this comes from.
//
// Like kpm, a symlink to a file is read through; a symlink to a directory is an error. Unlike
// kpm, the ignore test looks at the path relative to dir, not the absolute path.
func Checksum(dir string) (string, error) {
	h := sha256.New()
	err := filepath.Walk(dir, func(path string, info fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		for _, ig := range checksumIgnores {
			if strings.Contains(filepath.ToSlash(rel), ig) {
				return nil
			}
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.Copy(h, f); err != nil {
			return fmt.Errorf("reading %s: %w", rel, err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(h.Sum(nil)), nil
}
