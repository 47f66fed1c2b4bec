package artifactstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/artifact/config"
	"github.com/fluxcd/pkg/artifact/digest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// The digest key is created once in the storage directory, readable by the controller only, kept
// across restarts, and apart from the URL key: rotating that key changes no digest.
func TestDigestKeyLivesWithTheStorage(t *testing.T) {
	s, err := newStore(t, "")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(s.BasePath, DigestKeyFileName)
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != keySize {
		t.Fatalf("%s: %v, %v", p, fi, err)
	}
	d := s.Keyed("input-digest", "apps", "doc")
	if !strings.HasPrefix(d, KeyedPrefix) || len(d) != len(KeyedPrefix)+64 {
		t.Errorf("keyed digest %q", d)
	}
	for name, other := range map[string]string{
		"another purpose": s.Keyed("artifact-salt", "apps", "doc"),
		"another part":    s.Keyed("input-digest", "apps", "doc2"),
		"parts apart":     s.Keyed("input-digest", "appsdoc"),
	} {
		if other == d {
			t.Errorf("%s: the same digest", name)
		}
	}
	if err := s.SetURLKey([]byte(strings.Repeat("k", 32))); err != nil {
		t.Fatal(err)
	}
	if got := s.Keyed("input-digest", "apps", "doc"); got != d {
		t.Error("a new URL key changed the digest")
	}
	again, err := New(&config.Options{StoragePath: s.BasePath, StorageAddress: "127.0.0.1:0", StorageAdvAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Keyed("input-digest", "apps", "doc"); got != d {
		t.Error("a restart on the same storage changed the digest")
	}
	lost, err := newStore(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := lost.Keyed("input-digest", "apps", "doc"); got == d {
		t.Error("another storage's key gave the same digest")
	}
}

// A salted artifact holds one more file; the same files give the same artifact, other files or
// another object another one, and the artifact's name and digest are not those of the files
// alone.
func TestSaltedArtifacts(t *testing.T) {
	s, err := newStore(t, "")
	if err != nil {
		t.Fatal(err)
	}
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web", UID: "u1"}}
	files := func(yaml string) []File { return []File{{Name: "manifests.yaml", Content: contentOf(t, yaml)}} }
	plain, err := s.StoreFiles(obj, "main", files("a: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	salted := s.Salted(obj, files("a: 1\n"))
	if len(salted) != 2 || salted[0].Name != SaltName || salted[1].Name != "manifests.yaml" {
		t.Fatalf("salted files: %v", salted)
	}
	a, err := s.StoreFiles(obj, "main", salted)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.StoreFiles(obj, "main", s.Salted(obj, files("a: 1\n")))
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.StoreFiles(obj, "main", s.Salted(obj, files("a: 2\n")))
	if err != nil {
		t.Fatal(err)
	}
	other := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "api", UID: "u2"}}
	d, err := s.StoreFiles(other, "main", s.Salted(other, files("a: 1\n")))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case a.Digest != b.Digest || a.Path != b.Path:
		t.Errorf("the same files: %s and %s", a.Digest, b.Digest)
	case a.Digest == plain.Digest || filepath.Base(a.Path) == filepath.Base(plain.Path):
		t.Errorf("salted %s is the plain artifact %s", a.Path, plain.Path)
	case c.Digest == a.Digest:
		t.Error("other files, the same artifact")
	case filepath.Base(d.Path) == filepath.Base(a.Path):
		t.Error("another object, the same artifact name")
	}
}

// BenchmarkKeyedRender is what keying adds to the render of a KCLArtifact that reads Secrets,
// besides its input digest: the Jobs' keyed revision and the artifact's salt, for a 1 KB output
// (the output itself is hashed by every render, keyed or not, and the salt file is archived in
// the same tarball: their cost does not grow with the output).
func BenchmarkKeyedRender(b *testing.B) {
	saved := digest.Canonical
	b.Cleanup(func() { digest.Canonical = saved })
	s, err := New(&config.Options{StoragePath: b.TempDir(), StorageAddress: "127.0.0.1:0", StorageAdvAddress: "127.0.0.1:0"})
	if err != nil {
		b.Fatal(err)
	}
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web", UID: "u1"}}
	c := NewContent()
	defer c.Close()
	_, _ = c.Write([]byte(strings.Repeat("a: 1\n", 200)))
	files := []File{{Name: "manifests.yaml", Content: c}}
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Keyed("output-revision", "apps/web", "sha256:"+strings.Repeat("ab", 32))
		_ = s.Salted(obj, files)
	}
}
