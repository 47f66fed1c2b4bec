package artifactstore

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/artifact/config"
	"github.com/fluxcd/pkg/artifact/digest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// The digest key is derived from the URL key: kept across restarts with the storage (or the key
// file), shared by replicas given one key file, changed with the URL key.
func TestDigestKeyFollowsTheURLKey(t *testing.T) {
	s, err := newStore(t, "")
	if err != nil {
		t.Fatal(err)
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
	again, err := New(&config.Options{StoragePath: s.BasePath, StorageAddress: "127.0.0.1:0", StorageAdvAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if got := again.Keyed("input-digest", "apps", "doc"); got != d {
		t.Error("a restart on the same storage changed the digest")
	}
	if string(s.digestKey) == string(s.urlKey) {
		t.Error("the digest key is the URL key")
	}
	// replicas of their own storage, given one key file
	shared := []byte(strings.Repeat("k", 32))
	replica, err := newStore(t, "")
	if err != nil {
		t.Fatal(err)
	}
	if replica.Keyed("input-digest", "apps", "doc") == d {
		t.Error("another storage's key gave the same digest")
	}
	for _, st := range []*Store{s, replica} {
		if err := st.SetURLKey(shared); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := s.Keyed("input-digest", "apps", "doc"), replica.Keyed("input-digest", "apps", "doc"); a != b || a == d {
		t.Errorf("with one URL key: %s and %s (before: %s)", a, b, d)
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
