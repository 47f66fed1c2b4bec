// Package staging lays out what a render may see. Under one root, each namespace has its own
// directory, the only tree a confined worker of that namespace may read; in it, each render gets
// a fresh directory with a random name holding its source and resolved dependencies, removed
// when the render is over. Random names mean no engine-side cache keyed by path can hand one
// render's files to another.
package staging

import (
	"fmt"
	"os"
	"path/filepath"

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

// Dir is one render's staging directory.
type Dir struct {
	// Path is the directory; Source and Deps are where the source and dependencies go in it.
	Path string
	// NamespaceRoot is the namespace directory it is in.
	NamespaceRoot string
}

// Source is where the source artifact is unpacked.
func (d *Dir) Source() string { return filepath.Join(d.Path, "source") }

// Deps is where resolved dependencies are linked.
func (d *Dir) Deps() string { return filepath.Join(d.Path, "deps") }

// Remove deletes the render's directory.
func (d *Dir) Remove() error { return os.RemoveAll(d.Path) }

// New creates a fresh render directory in the namespace's root.
func (a *Area) New(namespace string) (*Dir, error) {
	ns, err := a.NamespaceRoot(namespace)
	if err != nil {
		return nil, err
	}
	p, err := os.MkdirTemp(ns, "render-")
	if err != nil {
		return nil, err
	}
	return &Dir{Path: p, NamespaceRoot: ns}, nil
}

// Private returns (and creates) a directory of the controller's own, beside the namespaces but
// never one of them: its name is not a valid namespace.
func (a *Area) Private(name string) (string, error) {
	d := filepath.Join(a.root, "_"+name)
	return d, os.MkdirAll(d, 0o700)
}
