package kclmod

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// Stage puts every cached package of the result under dst and points Packages (hence
// ExternalPkgs) there, so that a confined render reads its own dependencies and nothing else of
// the shared cache. Files are hard links when dst is on the cache's filesystem (a filled entry is
// never modified, and workers cannot write), copies otherwise. Once staged, the result can be
// released: the links keep the files when the cache evicts the entry.
func (res *Result) Stage(dst string) error {
	if res == nil {
		return nil
	}
	res.mu.Lock()
	defer res.mu.Unlock()
	for i, entry := range res.entries {
		to := filepath.Join(dst, strconv.Itoa(i))
		if err := linkTree(entry, to); err != nil {
			return fmt.Errorf("staging dependencies: %w", err)
		}
		for j := range res.Packages {
			p := &res.Packages[j]
			if p.Source != SourceOCI && p.Source != SourceGit || !within(entry, p.Path) {
				continue
			}
			rel, err := filepath.Rel(entry, p.Path)
			if err != nil {
				return err
			}
			p.Path = filepath.Join(to, rel)
		}
	}
	return nil
}

// linkTree recreates the directories and regular files of src in dst; nothing else is copied.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type().IsRegular():
			if os.Link(p, to) == nil {
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
