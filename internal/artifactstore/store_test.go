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

func newStore(t *testing.T, algo string) (*Store, error) {
	t.Helper()
	saved := digest.Canonical
	t.Cleanup(func() { digest.Canonical = saved })
	dir := t.TempDir()
	return New(&config.Options{StoragePath: dir, StorageAddress: "127.0.0.1:0", StorageAdvAddress: "127.0.0.1:0",
		ArtifactDigestAlgo: algo, ArtifactRetentionRecords: 2})
}

func TestDigestAlgorithmFlag(t *testing.T) {
	for _, algo := range []string{"sha256", "sha512"} {
		t.Run(algo, func(t *testing.T) {
			s, err := newStore(t, algo)
			if err != nil {
				t.Fatal(err)
			}
			content := t.TempDir()
			if err := os.WriteFile(filepath.Join(content, "all.yaml"), []byte("kind: ConfigMap\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}
			a, moved, err := s.Publish(obj, "main", content, "all.yaml")
			if err != nil || !moved {
				t.Fatalf("first publish: moved %v, err %v", moved, err)
			}
			if _, moved, err := s.Publish(obj, "main", content, "all.yaml"); err != nil || moved {
				t.Fatalf("the same content again: moved %v, err %v", moved, err)
			}
			if !strings.HasPrefix(a.Digest, algo+":") || !strings.HasPrefix(a.Revision, "main@"+algo+":") {
				t.Fatalf("digest %q, revision %q: want %s", a.Digest, a.Revision, algo)
			}
			if !s.Present(a) {
				t.Fatal("the stored artifact does not verify")
			}
		})
	}
}

func TestUnknownDigestAlgorithm(t *testing.T) {
	if _, err := newStore(t, "md5"); err == nil || !strings.Contains(err.Error(), "--artifact-digest-algo") {
		t.Fatalf("want an error naming --artifact-digest-algo, got %v", err)
	}
}

// Present hashes a file once, and again when it changed on disk.
func TestPresentNoticesAChangedFile(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	content := t.TempDir()
	if err := os.WriteFile(filepath.Join(content, "all.yaml"), []byte("kind: ConfigMap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, _, err := s.Publish(&kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}, "main", content, "all.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Present(a) || !s.Present(a) {
		t.Fatal("the stored artifact is not present")
	}
	if err := os.WriteFile(s.LocalPath(*a), []byte("tampered, and longer than before"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s.Present(a) {
		t.Fatal("a changed artifact file still passes as present")
	}
	if err := os.Remove(s.LocalPath(*a)); err != nil {
		t.Fatal(err)
	}
	if s.Present(a) {
		t.Fatal("a removed artifact file still passes as present")
	}
}
