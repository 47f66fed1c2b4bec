package nodeimage_test

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kcl-flux/kcl-artifact-controller/test/nodeimage"
)

// appSpec is an image on the Debian base with one host file, configured in every field.
func appSpec(t *testing.T, src string) nodeimage.Spec {
	t.Helper()
	e, err := nodeimage.HostFile("/opt/app/run", src, "test")
	if err != nil {
		t.Fatal(err)
	}
	return nodeimage.Spec{
		Name:   "app",
		Ref:    "example.test/app:v1",
		Layers: []nodeimage.Layer{base(t).Layer, {Name: "app", Entries: []nodeimage.Entry{e, nodeimage.Dir("/data", 0o750, 65532, 65532)}}},
		Config: nodeimage.Config{
			User: "65532:65532", Entrypoint: []string{"/opt/app/run"}, Cmd: []string{"serve", "--x"},
			Env: []string{"A=1"}, WorkingDir: "/data", Labels: map[string]string{"k": "v"},
		},
	}
}

func TestBaseHasNoShellButUsersAndCerts(t *testing.T) {
	b := base(t)
	fs := specFS(t, nodeimage.Spec{Name: "base", Layers: []nodeimage.Layer{b.Layer}})
	for _, sh := range []string{"/bin/sh", "/usr/bin/sh", "/bin/bash", "/bin/dash", "/usr/bin/env", "/bin/ls"} {
		if real, f := fs.Resolve(sh); f != nil {
			t.Errorf("the base has %s (%s)", sh, real)
		}
	}
	for p, f := range fs.Files {
		if n := filepath.Base(p); f.Header.Typeflag == tar.TypeReg && (n == "sh" || n == "bash" || n == "dash" || n == "busybox") {
			t.Errorf("the base has a shell at %s", p)
		}
	}
	wantContains(t, fs, "/etc/passwd", "nonroot:x:65532:65532:", "nobody:x:65534:65534:", "root:x:0:0:")
	wantContains(t, fs, "/etc/group", "nonroot:x:65532:")
	wantContains(t, fs, "/etc/ssl/certs/ca-certificates.crt", "-----BEGIN CERTIFICATE-----")
	wantContains(t, fs, "/etc/os-release", "VERSION_CODENAME="+b.Codename) // through the symlink
	wantContains(t, fs, "/etc/services", "https")
	if _, f := fs.Resolve("/tmp"); f == nil || f.Header.Mode != 0o1777 {
		t.Errorf("/tmp: want a directory with mode 1777, got %+v", f)
	}
	if _, f := fs.Resolve("/home/nonroot"); f == nil || f.Header.Uid != 65532 {
		t.Errorf("/home/nonroot: want a directory of 65532, got %+v", f)
	}
	if m := fs.MissingLibraries(); len(m) > 0 {
		t.Errorf("the base's own ELF files miss: %v", m)
	}
	for _, pkg := range append(nodeimage.BasePackages, "ca-certificates") {
		if !strings.Contains(b.Labels()[nodeimage.LabelDebianPackages], pkg+"=") {
			t.Errorf("label %s does not name %s: %q", nodeimage.LabelDebianPackages, pkg, b.Labels()[nodeimage.LabelDebianPackages])
		}
	}
}

func wantContains(t *testing.T, fs *nodeimage.RootFS, p string, subs ...string) {
	t.Helper()
	_, f := fs.Resolve(p)
	if f == nil {
		t.Errorf("%s: not in the image", p)
		return
	}
	for _, s := range subs {
		if !strings.Contains(string(f.Data), s) {
			t.Errorf("%s does not contain %q", p, s)
		}
	}
}

// Same inputs, same image, to the byte, although the host file's mtime and the clock (tar keeps
// seconds) changed in between; a different content gives a different image.
func TestDeterministic(t *testing.T) {
	src := writeFile(t, filepath.Join(t.TempDir(), "run"), 0o755, "#!/opt/app\n")
	spec := appSpec(t, src)
	r1, _ := build(t, spec)
	time.Sleep(1100 * time.Millisecond)
	if err := os.Chtimes(src, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	r2, _ := build(t, spec)
	if r1.ID != r2.ID || r1.Digest != r2.Digest || r1.Size != r2.Size {
		t.Fatalf("two builds differ:\n%+v\n%+v", r1, r2)
	}
	writeFile(t, src, 0o755, "#!/opt/app2\n")
	r3, _ := build(t, spec)
	if r3.Digest == r1.Digest || r3.ID == r1.ID {
		t.Errorf("another content, the same image: %s", r3.Digest)
	}
}

// The tarball's bytes themselves are the same twice (not only the digests ggcr computes).
func TestTarballBytesDeterministic(t *testing.T) {
	spec := appSpec(t, writeFile(t, filepath.Join(t.TempDir(), "run"), 0o755, "x"))
	sum := func() [32]byte {
		dir := t.TempDir()
		r, err := nodeimage.Build(spec, nodeimage.Options{OutDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, r.Tar))
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(data)
	}
	if a, b := sum(), sum(); a != b {
		t.Errorf("tarball bytes differ: %x vs %x", a, b)
	}
}

func TestRoundTrip(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	epoch := time.Unix(1700000000, 0).UTC()
	src := writeFile(t, filepath.Join(t.TempDir(), "run"), 0o750, "payload")
	spec := appSpec(t, src)
	_, img := build(t, spec) // opened by its ref: the tag is in manifest.json
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	got := nodeimage.Config{User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd, Env: c.Env, WorkingDir: c.WorkingDir, Labels: c.Labels}
	if !reflect.DeepEqual(got, spec.Config) {
		t.Errorf("config:\n got %+v\nwant %+v", got, spec.Config)
	}
	if cf.OS != "linux" || cf.Architecture == "" || !cf.Created.Time.Equal(epoch) {
		t.Errorf("os %q arch %q created %v, want linux, an architecture, %v", cf.OS, cf.Architecture, cf.Created.Time, epoch)
	}
	if len(cf.History) != 2 || !strings.Contains(cf.History[1].CreatedBy, "app") {
		t.Errorf("history: %+v", cf.History)
	}
	fs := imageFS(t, img)
	_, f := fs.Resolve("/opt/app/run")
	if f == nil || string(f.Data) != "payload" || f.Header.Mode != 0o750 || f.Header.Uid != 0 {
		t.Fatalf("/opt/app/run: %+v", f)
	}
	if _, d := fs.Resolve("/data"); d == nil || d.Header.Uid != 65532 || d.Header.Gid != 65532 {
		t.Errorf("/data: want owned by 65532:65532, got %+v", d)
	}
	checkLayers(t, img, epoch)
}

// checkLayers: every entry has the epoch as mtime, no owner names, and entries come sorted with
// each directory before what it holds.
func checkLayers(t *testing.T, img v1.Image, epoch time.Time) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		names := layerNames(t, rc, epoch)
		rc.Close()
		if !sort.StringsAreSorted(names) {
			t.Errorf("layer %d: entries not sorted", i)
		}
		seen := map[string]bool{}
		for _, n := range names {
			if d := filepath.Dir(n); d != "." && !seen[d] {
				t.Errorf("layer %d: %s comes before its directory", i, n)
			}
			seen[n] = true
		}
	}
}

func layerNames(t *testing.T, r io.Reader, epoch time.Time) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %v uname %q gname %q", h.Name, h.ModTime, h.Uname, h.Gname)
		}
		names = append(names, strings.TrimSuffix(h.Name, "/"))
	}
}

// An image is written again only when what it is made of changes; the index lists every image of
// the directory, also those of earlier runs.
func TestCacheAndIndex(t *testing.T) {
	dir := t.TempDir()
	src := writeFile(t, filepath.Join(t.TempDir(), "run"), 0o755, "one")
	spec := appSpec(t, src)
	other := spec
	other.Name, other.Ref = "other", "example.test/other:v2"
	r1 := mustBuild(t, spec, dir)
	mustBuild(t, other, dir)
	if again := mustBuild(t, spec, dir); !again.Cached || again.ID != r1.ID {
		t.Errorf("unchanged inputs: want the cached tarball %s, got %+v", r1.ID, again)
	}
	writeFile(t, src, 0o755, "two")
	r2 := mustBuild(t, spec, dir)
	if r2.Cached || r2.ID == r1.ID {
		t.Errorf("changed file: want a new image, got %+v", r2)
	}
	rs, err := nodeimage.WriteIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	index, err := os.ReadFile(filepath.Join(dir, nodeimage.IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	want := "example.test/app:v1 app.tar " + r2.ID + "\n" + "example.test/other:v2 other.tar " + rs[1].ID + "\n"
	if string(index) != want {
		t.Errorf("index:\n%s\nwant:\n%s", index, want)
	}
}

func mustBuild(t *testing.T, spec nodeimage.Spec, dir string) nodeimage.Result {
	t.Helper()
	r, err := nodeimage.Build(spec, nodeimage.Options{OutDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The build refuses an image whose ELF files would not load: here a library linked against
// libm, on a base without libm.
func TestMissingLibrariesRefused(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libx.so")
	c := writeFile(t, filepath.Join(dir, "x.c"), 0o644, "#include <math.h>\ndouble x(double v) { return sqrt(v); }\n")
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, c, "-Wl,--no-as-needed", "-lm").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	e, err := nodeimage.HostFile("/usr/local/lib/libx.so", lib, "test")
	if err != nil {
		t.Fatal(err)
	}
	full := nodeimage.Spec{Name: "x", Ref: "example.test/x:1", Layers: []nodeimage.Layer{base(t).Layer, {Name: "x", Entries: []nodeimage.Entry{e}}}}
	if m := specFS(t, full).MissingLibraries(); len(m) > 0 {
		t.Fatalf("with libm: missing %v", m)
	}
	noLibm := full
	noLibm.Layers = []nodeimage.Layer{without(base(t).Layer, "libm.so"), full.Layers[1]}
	m := specFS(t, noLibm).MissingLibraries()
	if !slices.Contains(m, "/usr/local/lib/libx.so: libm.so.6") {
		t.Errorf("without libm: want libx.so's libm.so.6 missing, got %q", m)
	}
	for _, line := range m {
		if !strings.HasSuffix(line, ": libm.so.6") {
			t.Errorf("without libm: unexpected %q", line)
		}
	}
	if _, err := nodeimage.Build(noLibm, nodeimage.Options{OutDir: dir}); err == nil || !strings.Contains(err.Error(), "libm.so.6") {
		t.Errorf("Build without libm: want an error naming libm.so.6, got %v", err)
	}
}

func without(l nodeimage.Layer, sub string) nodeimage.Layer {
	var kept []nodeimage.Entry
	for _, e := range l.Entries {
		if !strings.Contains(e.Path, sub) {
			kept = append(kept, e)
		}
	}
	return nodeimage.Layer{Name: l.Name, Entries: kept}
}
