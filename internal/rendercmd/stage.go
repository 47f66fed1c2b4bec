package rendercmd

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/kcl-flux/kcl-artifact-controller/internal/fstree"
)

// stagedTree is a copy of the tree a program is rendered from, without version control
// metadata: a checkout's .git holds the CI job's token (actions/checkout persists it in
// .git/config) and is never readable by a program, whatever its path.
type stagedTree struct {
	copy, original string
}

// stageTree copies root, but for its version control metadata, into a temporary directory and
// points the options there: the directory the program runs in, relative inputs and settings,
// and absolute ones inside root. Confined, files are hard links where possible (the program
// cannot write); unconfined, copies, so that nothing it writes reaches the checkout. It returns
// the copy's root and where base is in it.
func (f *flags) stageTree(root, base string) (newRoot, newBase string, err error) {
	if root == "" {
		root = base
	}
	dir, err := os.MkdirTemp("", "kcl-render-src-")
	if err != nil {
		return "", "", err
	}
	if err := fstree.LinkExcept(root, dir, !f.sandbox, fstree.VCSMetadata); err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	f.staged = &stagedTree{copy: dir, original: root}
	remap := func(p string) string {
		if filepath.IsAbs(p) && fstree.Within(root, p) {
			rel, _ := filepath.Rel(root, p)
			return filepath.Join(dir, rel)
		}
		return p
	}
	for i, in := range f.opts.Inputs {
		f.opts.Inputs[i] = remap(in)
	}
	for i, s := range f.opts.Settings {
		f.opts.Settings[i] = remap(s)
	}
	newBase = remap(base)
	f.opts.Dir = newBase
	if f.opts.Root != "" {
		f.opts.Root = dir
	}
	return dir, newBase, nil
}

// shown names the checkout's paths in a render's error instead of the copy's.
func (f *flags) shown(err error) error {
	if err == nil || f.staged == nil {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), f.staged.copy, f.staged.original))
}
