package render

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/kcl-flux/kcl-artifact-controller/internal/fstree"
)

// OutsideError is a path given to the engine that leaves the render's root. It names the option
// (or file) that gave it and the path as written, never anything read from it.
type OutsideError struct {
	Field string
	Path  string
}

func (e *OutsideError) Error() string {
	return fmt.Sprintf("%s: %q is outside the source", e.Field, e.Path)
}

// confiner resolves paths the way kcl does (${KCL_MOD}, ${pkg:KCL_MOD}, relative to a base) and,
// when root is set, refuses any that leaves it. Without a root paths pass as kcl takes them.
type confiner struct {
	root      string            // "" = no confinement
	modRoot   string            // what ${KCL_MOD} stands for
	externals map[string]string // package name -> directory, for ${name:KCL_MOD}
}

var modRef = regexp.MustCompile(`^\$\{(?:([A-Za-z0-9_-]+):)?KCL_MOD\}`)

// path returns p made absolute against base, checked against the root.
func (c *confiner) path(field, base, p string) (string, error) {
	if c.root == "" {
		return absPath(base, p), nil
	}
	bound, written := c.root, p
	if m := modRef.FindStringSubmatch(p); m != nil {
		dir := c.modRoot
		if m[1] != "" {
			var ok bool
			if dir, ok = c.externals[m[1]]; !ok {
				return "", fmt.Errorf("%s: %q names package %s, which is not a dependency", field, p, m[1])
			}
			// ${pkg:KCL_MOD} stays inside that package
			bound = dir
		}
		p = dir + p[len(m[0]):]
	} else if strings.HasPrefix(p, "${") {
		return "", fmt.Errorf("%s: %q: only ${KCL_MOD} and ${name:KCL_MOD} are supported", field, p)
	}
	abs := absPath(base, p)
	if !inside(bound, abs) {
		return "", &OutsideError{Field: field, Path: written}
	}
	return abs, nil
}

// inside reports whether p is inside root, lexically and once symbolic links are resolved.
func inside(root, p string) bool {
	if !fstree.Within(root, p) {
		return false
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return false
	}
	// Resolve the longest part that exists: a missing file behind a link still leaves the root.
	for q := filepath.Clean(p); ; q = filepath.Dir(q) {
		real, err := filepath.EvalSymlinks(q)
		if err == nil {
			return fstree.Within(realRoot, real)
		}
		if !os.IsNotExist(err) || filepath.Dir(q) == q {
			return false
		}
	}
}
