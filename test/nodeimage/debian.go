package nodeimage

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// BasePackages are the Debian packages whose installed files make the runtime base: the C library
// and libgcc_s (the controller's dlopened KCL engine links against both; `readelf -d
// bin/libkcl.so`), netbase (/etc/services, /etc/protocols) and base-files (/etc/os-release, the
// directory skeleton). No shell, no coreutils: nothing here runs a script.
var BasePackages = []string{"base-files", "netbase", "libc6", "libgcc-s1"}

// caBundle is the host's CA bundle, copied as such: ca-certificates ships the individual
// certificates, the bundle is what update-ca-certificates generated from them.
const caBundle = "/etc/ssl/certs/ca-certificates.crt"

// Base is the runtime base layer and what it was made of.
type Base struct {
	Layer    Layer
	Versions map[string]string // Debian package => version, the packages and ca-certificates
	Codename string            // VERSION_CODENAME of the base's os-release, e.g. "bookworm"
}

// Labels describe the base in the images built on it.
func (b *Base) Labels() map[string]string {
	pkgs := make([]string, 0, len(b.Versions))
	for p, v := range b.Versions {
		pkgs = append(pkgs, p+"="+v)
	}
	sort.Strings(pkgs)
	return map[string]string{
		"org.opencontainers.image.base.name": "debian:" + b.Codename + " (packages installed on the build machine)",
		LabelDebianPackages:                  strings.Join(pkgs, " "),
	}
}

// LabelDebianPackages lists "package=version" of the base, space separated.
const LabelDebianPackages = "io.kcl-flux.debian.packages"

// DebianBase makes the base layer from the files dpkg lists for BasePackages on this machine (no
// network: the packages are already installed), plus the CA bundle and the users.
func DebianBase() (*Base, error) {
	b := &Base{Versions: map[string]string{}}
	var entries []Entry
	for _, pkg := range append(BasePackages, "ca-certificates") {
		v, err := dpkgQuery("-W", "-f=${Version}", pkg)
		if err != nil {
			return nil, err
		}
		b.Versions[pkg] = v
	}
	for _, pkg := range BasePackages {
		e, err := packageEntries(pkg)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e...)
	}
	ca, err := HostFile(caBundle, caBundle, "apt-get install ca-certificates")
	if err != nil {
		return nil, err
	}
	entries = append(append(entries, ca), accounts()...)
	b.Layer = Layer{Name: "debian base: " + strings.Join(BasePackages, " ") + ", CA bundle, users", Entries: entries}
	b.Codename, err = codename(entries)
	return b, err
}

func dpkgQuery(args ...string) (string, error) {
	out, err := exec.Command("dpkg-query", args...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return "", fmt.Errorf("dpkg-query %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(ee.Stderr))
	}
	if err != nil {
		return "", fmt.Errorf("dpkg-query %s: %w (the base is made of the host's Debian packages)", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// packageEntries are the kept files of an installed package, as they are on the host.
func packageEntries(pkg string) ([]Entry, error) {
	list, err := dpkgQuery("-L", pkg)
	if err != nil {
		return nil, err
	}
	var entries []Entry
	sc := bufio.NewScanner(strings.NewReader(list))
	for sc.Scan() {
		p := sc.Text()
		if !strings.HasPrefix(p, "/") || p == "/." || !keepPackagePath(p) {
			continue // "diverted by" notes, the root itself, docs
		}
		e, ok, err := hostEntry(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", pkg, err)
		}
		if ok {
			entries = append(entries, e)
		}
	}
	return entries, nil
}

// keepPackagePath leaves out what nothing in a container reads: documentation (but the copyright
// files, which the licenses ask to ship), manual pages, translations, and glibc's gconv modules
// (~8 MB, only used by iconv for charsets other than the built-in UTF-8/ASCII/Latin-1 ones).
func keepPackagePath(p string) bool {
	if strings.HasPrefix(p, "/usr/share/doc/") {
		return path.Base(p) == "copyright"
	}
	for _, skip := range []string{"/usr/share/man", "/usr/share/info", "/usr/share/locale", "/usr/share/lintian", "/usr/share/bug"} {
		if p == skip || strings.HasPrefix(p, skip+"/") {
			return false
		}
	}
	return !strings.Contains(p+"/", "/gconv/")
}

// hostEntry copies the host's object at p. dpkg lists paths as packaged (/lib/x86_64-linux-gnu/
// libc.so.6) while merged-/usr hosts have /lib -> usr/lib: the directories of p are resolved so
// the image gets the same layout (the /lib symlink itself comes from base-files' "/lib" entry).
// Paths that no longer exist (excluded by dpkg's path-exclude, removed conffiles) are skipped.
func hostEntry(p string) (Entry, bool, error) {
	dir, err := filepath.EvalSymlinks(filepath.Dir(p))
	if errors.Is(err, os.ErrNotExist) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	real := filepath.Join(dir, filepath.Base(p))
	fi, err := os.Lstat(real)
	if errors.Is(err, os.ErrNotExist) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, err
	}
	e := Entry{Path: real, Mode: tarMode(fi.Mode())}
	switch {
	case fi.IsDir():
		e.Type = tar.TypeDir
	case fi.Mode()&os.ModeSymlink != 0:
		e.Type = tar.TypeSymlink
		e.Link, err = os.Readlink(real)
	case fi.Mode().IsRegular():
		e.Type, e.Source = tar.TypeReg, real
	default:
		return Entry{}, false, nil // devices, sockets: none in these packages
	}
	return e, true, err
}

// accounts are what a distroless image has: root, nobody (Flux's images run as 65534) and nonroot
// (this controller's 65532), their homes and a world-writable /tmp. There is no login shell.
func accounts() []Entry {
	return []Entry{
		DataFile("/etc/passwd", 0o644, "root:x:0:0:root:/root:/sbin/nologin\n"+
			"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"+
			"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"),
		DataFile("/etc/group", 0o644, "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"),
		// Without it glibc asks DNS before /etc/hosts; Flux's images add the same line.
		DataFile("/etc/nsswitch.conf", 0o644, "passwd: files\ngroup: files\nhosts: files dns\n"),
		Dir("/root", 0o700, 0, 0),
		Dir("/home/nonroot", 0o700, 65532, 65532),
		Dir("/tmp", 0o1777, 0, 0),
	}
}

// codename reads VERSION_CODENAME from the os-release base-files installed.
func codename(entries []Entry) (string, error) {
	for _, e := range entries {
		if e.Path != "/usr/lib/os-release" || e.Type != tar.TypeReg {
			continue
		}
		data, err := entryData(e)
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "VERSION_CODENAME="); ok {
				return strings.Trim(v, `"`), nil
			}
		}
	}
	return "", errors.New("no VERSION_CODENAME in /usr/lib/os-release of base-files")
}
