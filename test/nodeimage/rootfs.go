package nodeimage

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// RootFS is the file system an image's layers add up to, read from their tarballs: the same view
// serves the build-time check of a spec and the tests' check of a written image.
type RootFS struct {
	Files map[string]*FSFile // by clean absolute path
}

// FSFile is one object of a RootFS; Data is the content of regular files.
type FSFile struct {
	Header tar.Header
	Data   []byte
}

// ReadRootFS applies layer tarballs bottom up: a later layer's entry replaces an earlier one.
// Whiteouts are not interpreted (this package writes none).
func ReadRootFS(layers ...io.Reader) (*RootFS, error) {
	fs := &RootFS{Files: map[string]*FSFile{}}
	for _, l := range layers {
		tr := tar.NewReader(l)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, err
			}
			f := &FSFile{Header: *hdr}
			if hdr.Typeflag == tar.TypeReg {
				if f.Data, err = io.ReadAll(tr); err != nil {
					return nil, err
				}
			}
			fs.Files[path.Clean("/"+hdr.Name)] = f
		}
	}
	return fs, nil
}

// ImageRootFS is the flattened file system of img.
func ImageRootFS(img v1.Image) (*RootFS, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	return ReadRootFS(rc)
}

// Resolve follows symlinks (in p itself and in its directories, as the kernel does inside the
// container) and returns the object p ends at, or nil.
func (fs *RootFS) Resolve(p string) (string, *FSFile) {
	todo := splitPath(p)
	cur := "/"
	for hops := 0; len(todo) > 0; {
		next := path.Join(cur, todo[0])
		todo = todo[1:]
		f := fs.Files[next]
		switch {
		case f == nil:
			return "", nil
		case f.Header.Typeflag == tar.TypeSymlink:
			if hops++; hops > 40 {
				return "", nil
			}
			target := f.Header.Linkname
			if !path.IsAbs(target) {
				target = path.Join(cur, target)
			}
			todo = append(splitPath(target), todo...)
			cur = "/"
		default:
			cur = next
		}
	}
	return cur, fs.Files[cur]
}

func splitPath(p string) []string {
	p = strings.Trim(path.Clean("/"+p), "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// multiarchDir is Debian's library directory of the image's architecture (amd64 only for now: the
// binaries are built on this machine).
const multiarchDir = "x86_64-linux-gnu"

// libraryDirs are the directories the dynamic loader searches without /etc/ld.so.cache, which the
// image does not have (`ld.so --help` lists them on Debian).
var libraryDirs = []string{"/lib/" + multiarchDir, "/usr/lib/" + multiarchDir, "/lib", "/usr/lib"}

// MissingLibraries checks every ELF file of the file system as the dynamic loader would: its
// interpreter (PT_INTERP) and each DT_NEEDED library must resolve to a regular file. Libraries
// that a program dlopens (libkcl.so) are ELF files of the image too, so their needs are checked as
// well. It returns one line per missing piece, sorted.
func (fs *RootFS) MissingLibraries() []string {
	var missing []string
	for p, f := range fs.Files {
		if f.Header.Typeflag != tar.TypeReg || !bytes.HasPrefix(f.Data, []byte(elf.ELFMAG)) {
			continue
		}
		ef, err := elf.NewFile(bytes.NewReader(f.Data))
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		missing = append(missing, fs.elfMissing(p, ef)...)
	}
	sort.Strings(missing)
	return missing
}

func (fs *RootFS) elfMissing(p string, ef *elf.File) []string {
	var missing []string
	if interp := interpreter(ef); interp != "" {
		if _, f := fs.Resolve(interp); f == nil || f.Header.Typeflag != tar.TypeReg {
			missing = append(missing, fmt.Sprintf("%s: interpreter %s", p, interp))
		}
	}
	found, err := fs.resolveNeeded(p, ef)
	if err != nil {
		return append(missing, fmt.Sprintf("%s: %v", p, err))
	}
	for lib, where := range found {
		if where == "" {
			missing = append(missing, fmt.Sprintf("%s: %s", p, lib))
		}
	}
	return missing
}

// NeededBy lists the DT_NEEDED libraries of the ELF file at p with where each resolves ("" when
// it does not): what the tests show about libkcl.so.
func (fs *RootFS) NeededBy(p string) (map[string]string, error) {
	_, f := fs.Resolve(p)
	if f == nil {
		return nil, fmt.Errorf("%s: not in the image", p)
	}
	ef, err := elf.NewFile(bytes.NewReader(f.Data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return fs.resolveNeeded(p, ef)
}

// resolveNeeded maps each DT_NEEDED library of the ELF file at p to the image path the loader
// would load it from, or "". The search: the file's RUNPATH/RPATH, then the default directories.
func (fs *RootFS) resolveNeeded(p string, ef *elf.File) (map[string]string, error) {
	needed, err := ef.ImportedLibraries()
	if err != nil {
		return nil, err
	}
	dirs := append(searchPath(ef, path.Dir(p)), libraryDirs...)
	found := make(map[string]string, len(needed))
	for _, lib := range needed {
		found[lib] = fs.findLibrary(lib, dirs)
	}
	return found, nil
}

// findLibrary returns the image path of the first regular file lib resolves to in dirs, or "".
func (fs *RootFS) findLibrary(lib string, dirs []string) string {
	if strings.Contains(lib, "/") {
		dirs = []string{""}
	}
	for _, d := range dirs {
		if real, f := fs.Resolve(path.Join(d, lib)); f != nil && f.Header.Typeflag == tar.TypeReg {
			return real
		}
	}
	return ""
}

func interpreter(ef *elf.File) string {
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(prog.Open())
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}

// searchPath is the file's DT_RUNPATH (or the older DT_RPATH) with $ORIGIN expanded.
func searchPath(ef *elf.File, origin string) []string {
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := ef.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", origin), "$ORIGIN", origin)
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}
