package kclmod_test

import (
	"crypto/sha256"
	"encoding/base64"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

func TestParseMod(t *testing.T) {
	m, err := kclmod.ParseMod([]byte(`
[package]
name = "app"
edition = "v0.11.0"
version = "0.1.0"

[dependencies]
k8s = "1.31.2"
helloworld = { oci = "oci://ghcr.io/kcl-lang/helloworld", tag = "0.1.4" }
querytag = { oci = "oci://reg.example:5000/team/pkg?tag=1.0.0" }
hostless = { repo = "org/pkg", tag = "2.0.0" }
from-git = { git = "https://github.com/kcl-lang/konfig.git", tag = "v0.4.0" }
bycommit = { git = "git://example.com/x.git", commit = "0123456789abcdef0123456789abcdef01234567" }
local = { path = "../local" }
renamed = { oci = "oci://ghcr.io/kcl-lang/k8s", tag = "1.30", package = "k8s" }

[profile]
entries = ["main.k"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Package.Name != "app" || len(m.Profile.Entries) != 1 {
		t.Fatalf("package/profile: %+v", m)
	}
	got := map[string]kclmod.Dependency{}
	for _, d := range m.Dependencies {
		got[d.Name] = d
	}
	if d := got["k8s"]; d.Version != "1.31.2" || d.OCI != nil || d.Git != nil || d.Ref() != "1.31.2" {
		t.Errorf("k8s: %+v", d)
	}
	if d := got["helloworld"]; d.OCI == nil || d.OCI.Registry != "ghcr.io" || d.OCI.Repository != "kcl-lang/helloworld" || d.OCI.Tag != "0.1.4" {
		t.Errorf("helloworld: %+v %+v", d, d.OCI)
	}
	if d := got["querytag"]; d.OCI == nil || d.OCI.Registry != "reg.example:5000" || d.OCI.Tag != "1.0.0" {
		t.Errorf("querytag: %+v", d.OCI)
	}
	if d := got["hostless"]; d.OCI == nil || d.OCI.Registry != "" || d.OCI.Repository != "org/pkg" {
		t.Errorf("hostless: %+v", d.OCI)
	}
	if d := got["from-git"]; d.Git == nil || d.Git.Tag != "v0.4.0" || d.ImportName() != "from_git" {
		t.Errorf("from-git: %+v", d)
	}
	if d := got["bycommit"]; d.Git == nil || d.Ref() != "0123456789abcdef0123456789abcdef01234567" {
		t.Errorf("bycommit: %+v", d)
	}
	if d := got["local"]; d.Path != "../local" || !d.IsLocal() {
		t.Errorf("local: %+v", d)
	}
	if d := got["renamed"]; d.Package != "k8s" || d.ImportName() != "renamed" {
		t.Errorf("renamed: %+v", d)
	}
	if _, err := kclmod.ParseMod([]byte("[dependencies]\nx = { git = \"https://h/x.git\", tag = \"a\", branch = \"b\" }\n")); err == nil {
		t.Error("two Git references must be refused")
	}
}

// The lock below is kcl-lang/kpm pkg/api/test_data/test_kpm_package/kcl_pkg/kcl.mod.lock plus
// a Git entry in the older format (zong-zhe/kcl2 kcl.mod.lock).
func TestParseLockFile(t *testing.T) {
	dir := t.TempDir()
	writeLock(t, dir, `[dependencies]
  [dependencies.helloworld]
    name = "helloworld"
    full_name = "helloworld_0.1.3"
    version = "0.1.3"
    sum = "T9FGqbdtkuML4+pDyf4SFP5bDcDusbra6AKtCZygvNw="
    reg = "ghcr.io"
    repo = "kcl-lang/helloworld"
    oci_tag = "0.1.3"
  [dependencies.kcl3]
    name = "kcl3"
    full_name = "kcl3_v0.0.4"
    version = "v0.0.4"
    sum = "up/FDUhRNnbDhJmFObUQCJ0s28LToEOtzNn5rmf1s5o="
    url = "https://github.com/zong-zhe/kcl3.git"
    tag = "v0.0.4"
`)
	l, err := kclmod.ParseLockFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	h := l.Dependencies["helloworld"]
	if h.Sum != "T9FGqbdtkuML4+pDyf4SFP5bDcDusbra6AKtCZygvNw=" || h.Reg != "ghcr.io" || h.OCITag != "0.1.3" {
		t.Errorf("helloworld: %+v", h)
	}
	if k := l.Dependencies["kcl3"]; k.URL == "" || k.Tag != "v0.0.4" {
		t.Errorf("kcl3: %+v", k)
	}
	if l, err := kclmod.ParseLockFile(t.TempDir()); err != nil || len(l.Dependencies) != 0 {
		t.Errorf("a missing lock is empty: %v %+v", err, l)
	}
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	kclmodtest.WriteFiles(t, dir, files)
}

func TestChecksumMatchesKpm(t *testing.T) {
	// kcl-lang/kpm pkg/utils/utils_test.go TestHashDir: a directory holding test_hash.txt with
	// "test" hashes to this.
	dir := t.TempDir()
	write(t, dir, map[string]string{"test_hash.txt": "test"})
	if got, _ := kclmod.Checksum(dir); got != "n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg=" {
		t.Errorf("kpm's HashDir test vector: got %s", got)
	}

	// A lock file written by kpm: kcl-lang/kpm
	// test/e2e/test_suites/test_data/test_kpm_run_with_local_dep/kcl1/kcl.mod.lock records
	// sum = "Q+ilCTK5EXPn7stwrtY2La1MQdP+wiAq5wHiG91NoB8=" for ../kcl2, a package of two files:
	// main.k (as in that repository) and the kcl.mod `kcl mod init` wrote for it.
	dir = t.TempDir()
	write(t, dir, map[string]string{
		"kcl.mod": "[package]\nname = \"kcl2\"\nedition = \"0.0.1\"\nversion = \"0.0.1\"\n\n",
		"main.k":  "schema SchemaInK2:\n    msg: str",
	})
	if got, _ := kclmod.Checksum(dir); got != "Q+ilCTK5EXPn7stwrtY2La1MQdP+wiAq5wHiG91NoB8=" {
		t.Errorf("kpm's lock sum for kcl2: got %s", got)
	}

	// Walk order (a/ before a.k, depth first) and the ".git"/".tar" substring rule.
	dir = t.TempDir()
	write(t, dir, map[string]string{
		"a.k": "A", "a/b.k": "B", "b.k": "C",
		".git/config": "x", ".gitignore": "x", ".github/w.yaml": "x", "pkg-0.1.0.tar": "x", "sub/x.tar/y": "x",
	})
	want := sha256.Sum256([]byte("BAC"))
	if got, _ := kclmod.Checksum(dir); got != base64.StdEncoding.EncodeToString(want[:]) {
		t.Errorf("walk order or ignores: got %s", got)
	}
}
