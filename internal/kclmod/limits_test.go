package kclmod_test

import (
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

// countTree counts everything under dir, dir excluded.
func countTree(t *testing.T, dir string) int {
	t.Helper()
	n := -1
	if err := filepath.WalkDir(dir, func(string, fs.DirEntry, error) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// A package layer of a million empty files (a few MB of gzip) is refused at the bound: the error
// names it, and the cache holds nothing of the package afterwards.
func TestMillionEntryPackageFailsAtTheBound(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	layer, err := kclmodtest.EmptyFilesTarGz(1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.PushLayer(ctx(t), reg.Host+"/kcl-lang/many:0.0.1", layer, types.OCILayer, map[string]string{
		kclmod.AnnotationPackageName: "many", kclmod.AnnotationPackageVer: "0.0.1",
	}); err != nil {
		t.Fatal(err)
	}
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{`many = "0.0.1"`}, nil)
	cache := t.TempDir()
	r := newResolver(t, kclmod.Options{DefaultRegistry: reg.Host, CacheDir: cache, MaxPackageFiles: 1000})
	_, err = r.Resolve(ctx(t), app, app, kclmod.Credentials{})
	mustContain(t, err, `dependency "many"`, "more than 1000 files and directories")
	if reg.BlobGets() != 1 {
		t.Fatalf("blob GETs %d", reg.BlobGets())
	}
	if n := countTree(t, cache); n > 100 {
		t.Fatalf("the cache holds %d entries after the refusal", n)
	}
}

// Directories count against MaxPackageFiles like files, for OCI packages and Git trees alike.
func TestEntryBoundCountsDirectories(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	gs := kclmodtest.StartGitServer(t)
	// kcl.mod, a .. a/b/c/d/e/f/g/h (8 directories) and x.k: 10 entries, 2 of them files
	pkg := kclmodtest.WritePackage(t, t.TempDir(), "deep", "1.0.0", nil, map[string]string{"a/b/c/d/e/f/g/h/x.k": "x = 1\n"})
	push(t, reg, "kcl-lang/deep:1.0.0", pkg, kclmodtest.PushOptions{})
	gs.CreateRepo("deep", pkg)
	gs.Tag("deep", "v1")
	apps := map[string]string{
		"oci": kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{`deep = "1.0.0"`}, nil),
		"git": kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{`deep = { git = "` + gs.URL("deep") + `", tag = "v1" }`}, nil),
	}
	for kind, app := range apps {
		cache := t.TempDir()
		tight := newResolver(t, kclmod.Options{DefaultRegistry: reg.Host, CacheDir: cache, MaxPackageFiles: 9})
		_, err := tight.Resolve(ctx(t), app, app, kclmod.Credentials{})
		mustContain(t, err, `dependency "deep"`, "more than 9 files and directories")
		if n := countTree(t, filepath.Join(cache, "entries")); n != 0 {
			t.Fatalf("%s: %d cache entries after the refusal", kind, n)
		}
		// the package root of the OCI tar is an entry too
		roomy := newResolver(t, kclmod.Options{DefaultRegistry: reg.Host, MaxPackageFiles: 11})
		if p := pkgByName(t, resolve(t, roomy, app, kclmod.Credentials{}), "deep"); p.Source != kind {
			t.Fatalf("%s: %+v", kind, p)
		}
	}
}
