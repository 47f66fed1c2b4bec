// Package fstree works on directory trees: it recreates them for renders (the directories and
// regular files of a cached tree, as hard links where possible, so that staging costs one link
// per file) and tells whether a path is inside one.
package fstree

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Link recreates the directories and regular files of src in dst; nothing else is copied. Files
// are hard links when dst is on src's filesystem and copy is false, copies otherwise: a caller
// whose readers could write (an unconfined render) asks for copies, so that nothing they do
// reaches src.
func Link(src, dst string, copy bool) error {
	return LinkExcept(src, dst, copy, nil)
}

// LinkExcept is Link leaving out every path (relative to src, with '/') skip names, and what is
// under it.
func LinkExcept(src, dst string, copy bool, skip func(rel string) bool) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if skip != nil && rel != "." && skip(filepath.ToSlash(rel)) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type().IsRegular():
			if !copy && os.Link(p, to) == nil {
				return nil
			}
			return copyFile(p, to)
		}
		return nil
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Size is the total size of the regular files under dir.
func Size(dir string) (int64, error) {
	var size int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			size += fi.Size()
		}
		return err
	})
	return size, err
}

// Within reports whether p is root or inside it, lexically (after cleaning both): the one check
// of "is this path under that root" for the artifact server, the dependency resolver and the
// render's confinement (which also resolves symbolic links first).
func Within(root, p string) bool {
	rel, err := filepath.Rel(filepath.Clean(root), filepath.Clean(p))
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

// vcsNames are the directories (or, for Git worktrees and submodules, files) where version
// control keeps its metadata: a checkout's credentials (actions/checkout writes the job's token
// into .git/config) and history, which no program rendered from the tree may read.
var vcsNames = map[string]bool{".git": true, ".hg": true, ".svn": true, ".bzr": true}

// VCSMetadata reports whether a relative path ('/'-separated) is, or is inside, version control
// metadata.
func VCSMetadata(rel string) bool {
	for _, part := range strings.Split(strings.TrimPrefix(rel, "./"), "/") {
		if vcsNames[part] {
			return true
		}
	}
	return false
}
