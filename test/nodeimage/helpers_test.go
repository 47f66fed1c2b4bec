package nodeimage_test

import (
	"archive/tar"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/kcl-flux/kcl-artifact-controller/test/nodeimage"
)

// repoRoot: go test runs in the package directory, test/nodeimage.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// needInput skips the test when err is a missing binary (`make build`, `make testbin`), except on
// CI (CI=true), where the inputs must have been built and their absence is a failure.
func needInput(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if nodeimage.IsMissingInput(err) && os.Getenv("CI") != "true" {
		t.Skipf("input missing: %v", err)
	}
	t.Fatal(err)
}

var debianBase = sync.OnceValues(nodeimage.DebianBase)

func base(t *testing.T) *nodeimage.Base {
	t.Helper()
	b, err := debianBase()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// build builds spec into a new directory and opens the tarball as ctr would find it: by its ref.
func build(t *testing.T, spec nodeimage.Spec) (nodeimage.Result, v1.Image) {
	t.Helper()
	dir := t.TempDir()
	r, err := nodeimage.Build(spec, nodeimage.Options{OutDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return r, openTar(t, filepath.Join(dir, r.Tar), spec.Ref)
}

func openTar(t *testing.T, path, ref string) v1.Image {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("tarball.ImageFromPath(%s, %s): %v", path, ref, err)
	}
	return img
}

func imageFS(t *testing.T, img v1.Image) *nodeimage.RootFS {
	t.Helper()
	fs, err := nodeimage.ImageRootFS(img)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// specFS is the file system of a spec, without building the image.
func specFS(t *testing.T, spec nodeimage.Spec) *nodeimage.RootFS {
	t.Helper()
	fs, err := nodeimage.SpecRootFS(spec)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// writeFile writes a host file and returns its path.
func writeFile(t *testing.T, path string, mode os.FileMode, data string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// materialize writes fs into dir as a container runtime would unpack it: owners, modes, links.
func materialize(t *testing.T, fs *nodeimage.RootFS, dir string) {
	t.Helper()
	paths := make([]string, 0, len(fs.Files))
	for p := range fs.Files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		h := fs.Files[p].Header
		dst := filepath.Join(dir, p)
		var err error
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(dst, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, dst)
		case tar.TypeReg:
			err = os.WriteFile(dst, fs.Files[p].Data, 0o600)
		}
		if err == nil {
			err = os.Lchown(dst, h.Uid, h.Gid)
		}
		if err == nil && h.Typeflag != tar.TypeSymlink {
			err = os.Chmod(dst, h.FileInfo().Mode()) // after chown, which clears set-id bits
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// runInImage runs the image's entrypoint with args as a container would: in the image's file
// system, read-only, as the image's user, with only the image's environment, /proc and /dev.
// It needs root (chroot, mounts in a private mount namespace) and util-linux's unshare.
func runInImage(t *testing.T, img v1.Image, args ...string) (string, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("running the image's file system needs root (chroot)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("running the image's file system needs unshare (util-linux)")
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	materialize(t, imageFS(t, img), dir)
	script := `mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && mount -t proc proc "$1/proc" &&
mount --rbind /dev "$1/dev" && shift && exec env -i "$@"`
	argv := []string{"--mount", "--pid", "--fork", "sh", "-c", script, "sh", dir}
	argv = append(argv, cf.Config.Env...)
	argv = append(argv, "/usr/sbin/chroot", "--userspec="+cf.Config.User, dir)
	argv = append(append(argv, cf.Config.Entrypoint...), args...)
	out, err := exec.Command("unshare", argv...).CombinedOutput()
	return string(out), err
}
