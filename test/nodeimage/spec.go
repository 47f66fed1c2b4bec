// Package nodeimage builds OCI images without a Docker daemon, as docker-archive tarballs that
// `ctr -n k8s.io images import` loads on a Kubernetes node: this controller's image, Flux's
// source-controller, kustomize-controller and image-reflector-controller from binaries built here,
// a pause image and the demo workload. The runtime base is made of the Debian packages installed on the build machine, so no
// registry is needed. Builds are deterministic: the same inputs give the same image digest.
package nodeimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"os"
)

// Entry is one file system object of a layer. Ownership is root unless UID/GID say otherwise.
type Entry struct {
	Path   string // absolute path in the image
	Type   byte   // tar.TypeReg, tar.TypeDir or tar.TypeSymlink
	Mode   int64  // permission bits and setuid/setgid/sticky, as tar headers have them
	UID    int
	GID    int
	Link   string // symlink target
	Source string // regular file: the host file copied (read when the layer is written)
	Data   []byte // regular file without Source: its content
}

// Layer is a named set of entries; the name goes into the image history.
type Layer struct {
	Name    string
	Entries []Entry
}

// Config is the part of the OCI image configuration a Dockerfile would set.
type Config struct {
	User       string
	Entrypoint []string
	Cmd        []string
	Env        []string
	WorkingDir string
	Labels     map[string]string
}

// Spec is an image: its reference, its layers bottom up, and its configuration.
type Spec struct {
	Name   string // short name: the CLI target and the file names in the output directory
	Ref    string // the reference the tarball carries (docker-archive RepoTags)
	Layers []Layer
	Config Config
}

// MissingInputError is a host file an image needs that is not there, with the make target that
// produces it, so the message says what to run instead of only what failed.
type MissingInputError struct {
	Path   string
	Target string // e.g. "make build"
}

func (e *MissingInputError) Error() string {
	return fmt.Sprintf("%s does not exist: run `%s` first", e.Path, e.Target)
}

// IsMissingInput reports whether err is (or wraps) a MissingInputError.
func IsMissingInput(err error) bool {
	var m *MissingInputError
	return errors.As(err, &m)
}

// HostFile is the host file src at dst in the image, with src's permission bits (as a Dockerfile
// COPY keeps them). src may be a symlink (bin/flux/* are): its target is copied. A missing src is a
// MissingInputError naming makeTarget.
func HostFile(dst, src, makeTarget string) (Entry, error) {
	fi, err := os.Stat(src)
	if errors.Is(err, os.ErrNotExist) {
		return Entry{}, &MissingInputError{Path: src, Target: makeTarget}
	}
	if err != nil {
		return Entry{}, err
	}
	if !fi.Mode().IsRegular() {
		return Entry{}, fmt.Errorf("%s is not a regular file", src)
	}
	return Entry{Path: dst, Type: tar.TypeReg, Mode: tarMode(fi.Mode()), Source: src}, nil
}

// DataFile is a generated regular file.
func DataFile(dst string, mode int64, data string) Entry {
	return Entry{Path: dst, Type: tar.TypeReg, Mode: mode, Data: []byte(data)}
}

// Dir is a directory owned by uid:gid.
func Dir(dst string, mode int64, uid, gid int) Entry {
	return Entry{Path: dst, Type: tar.TypeDir, Mode: mode, UID: uid, GID: gid}
}

// tarMode converts Go's file mode to tar's permission and special bits.
func tarMode(m os.FileMode) int64 {
	mode := int64(m.Perm())
	if m&os.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
