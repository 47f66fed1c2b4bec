package kclmod

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/kcl-flux/kcl-artifact-controller/internal/fstree"
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
		if err := fstree.Link(entry, to, false); err != nil {
			return fmt.Errorf("staging dependencies: %w", err)
		}
		for j := range res.Packages {
			p := &res.Packages[j]
			if p.Source != SourceOCI && p.Source != SourceGit || !fstree.Within(entry, p.Path) {
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
