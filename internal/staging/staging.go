// Package staging lays out what a render may see. Under one root, each namespace has its own
// directory, the only tree a confined worker of that namespace may read. In it, the namespace's
// source trees are unpacked once per digest and shared by its renders, read-only (a path there
// always holds the same bytes, so an engine-side cache keyed by path cannot mix two sources up),
// and a render that needs one gets a fresh directory with a random name for its resolved
// dependencies (or, unconfined, for its own copy of the source), removed when it is over.
package staging

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Area is the staging root.
type Area struct {
	root string
	lock *os.File
}

// New takes the staging root for this process and removes what an earlier process left in it.
// A root held by another live process is refused: it would remove that process's renders.
func New(root string) (*Area, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(root, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("staging directory %s is in use by another process: give each its own", root)
	}
	des, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	for _, de := range des {
		if de.Name() != ".lock" {
			if err := os.RemoveAll(filepath.Join(root, de.Name())); err != nil {
				return nil, fmt.Errorf("cleaning the staging root: %w", err)
			}
		}
	}
	return &Area{root: root, lock: lock}, nil
}

// Close releases the staging root.
func (a *Area) Close() error { return a.lock.Close() }

// Root is the staging root.
func (a *Area) Root() string { return a.root }

// NamespaceRoot returns (and creates) the directory of a namespace: what its workers may read.
func (a *Area) NamespaceRoot(namespace string) (string, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return "", fmt.Errorf("invalid namespace %q: %v", namespace, errs)
	}
	d := filepath.Join(a.root, namespace)
	return d, os.MkdirAll(d, 0o700)
}

// Sources returns (and creates) the directory of a namespace's shared source trees, in its root:
// unpacked once per digest, read by every render of the namespace, written by none.
func (a *Area) Sources(namespace string) (string, error) {
	ns, err := a.NamespaceRoot(namespace)
	if err != nil {
		return "", err
	}
	d := filepath.Join(ns, sourcesDir)
	return d, os.MkdirAll(d, 0o700)
}

// sourcesDir cannot be a render's directory: those are "render-*".
const sourcesDir = "sources"

// Dir is what one render sees: its source and, in a directory of its own, its dependencies.
type Dir struct {
	// Path is the render's own directory ("" while a render of a shared source needs none).
	Path string
	// NamespaceRoot is the namespace directory it is in.
	NamespaceRoot string

	source  string
	release func()
}

// Source is where the source artifact is (or is to be unpacked).
func (d *Dir) Source() string { return d.source }

// Deps is where resolved dependencies are linked, in the render's own directory.
func (d *Dir) Deps() (string, error) {
	if d.Path == "" {
		p, err := os.MkdirTemp(d.NamespaceRoot, "render-")
		if err != nil {
			return "", err
		}
		d.Path = p
	}
	return filepath.Join(d.Path, "deps"), nil
}

// Remove deletes the render's own directory and lets go of a shared source.
func (d *Dir) Remove() error {
	if d.release != nil {
		d.release()
		d.release = nil
	}
	if d.Path == "" {
		return nil
	}
	return os.RemoveAll(d.Path)
}

// New creates a fresh render directory in the namespace's root, the source to be put in it.
func (a *Area) New(namespace string) (*Dir, error) {
	ns, err := a.NamespaceRoot(namespace)
	if err != nil {
		return nil, err
	}
	p, err := os.MkdirTemp(ns, "render-")
	if err != nil {
		return nil, err
	}
	return &Dir{Path: p, NamespaceRoot: ns, source: filepath.Join(p, "source")}, nil
}

// Shared is a render of source, a tree in the namespace's Sources; release is called by Remove.
// Nothing is created until the render needs a directory of its own (Deps).
func (a *Area) Shared(namespace, source string, release func()) (*Dir, error) {
	ns, err := a.NamespaceRoot(namespace)
	if err != nil {
		return nil, err
	}
	source = filepath.Clean(source)
	if !strings.HasPrefix(source, filepath.Join(ns, sourcesDir)+string(filepath.Separator)) {
		return nil, fmt.Errorf("%s is not a shared source of namespace %s", source, namespace)
	}
	return &Dir{NamespaceRoot: ns, source: source, release: release}, nil
}

// Private returns (and creates) a directory of the controller's own, beside the namespaces but
// never one of them: its name is not a valid namespace.
func (a *Area) Private(name string) (string, error) {
	d := filepath.Join(a.root, "_"+name)
	return d, os.MkdirAll(d, 0o700)
}
