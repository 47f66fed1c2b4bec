package artifactstore

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
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
			content := contentOf(t, "kind: ConfigMap\n")
			obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}
			a, moved, err := s.Publish(obj, "main", "all.yaml", content)
			if err != nil || !moved {
				t.Fatalf("first publish: moved %v, err %v", moved, err)
			}
			if _, moved, err := s.Publish(obj, "main", "all.yaml", content); err != nil || moved {
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
	content := contentOf(t, "kind: ConfigMap\n")
	a, _, err := s.Publish(&kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}, "main", "all.yaml", content)
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

// Publishing content whose file was damaged on disk writes it again rather than trusting the name.
func TestPublishRewritesADamagedFile(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}
	content := contentOf(t, "kind: ConfigMap\n")
	a, _, err := s.Publish(obj, "main", "all.yaml", content)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.LocalPath(*a), []byte("damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	again, _, err := s.Publish(obj, "main", "all.yaml", content)
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != a.Digest || !s.Present(again) {
		t.Fatalf("republished digest %s (first %s), present %v", again.Digest, a.Digest, s.Present(again))
	}
}

func contentOf(t *testing.T, s string) *Content {
	t.Helper()
	c := NewContent()
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	return c
}

// Content beyond the memory limit goes to a file and publishes the same artifact it would from
// memory; closing it removes the file.
func TestLargeContentSpillsToAFile(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("apiVersion: v1\nkind: ConfigMap\n---\n", 3*memoryLimit/32)
	c := contentOf(t, text)
	if c.file == nil {
		t.Fatalf("%d bytes stayed in memory", c.Size())
	}
	spill := c.file.Name()
	a, _, err := s.Publish(&kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}, "main", "all.yaml", c)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	if err := writeTarGz(&want, entry{"all.yaml", strings.NewReader(text), int64(len(text))}); err != nil {
		t.Fatal(err)
	}
	if got := digest.Canonical.FromBytes(want.Bytes()).String(); a.Digest != got || *a.Size != int64(want.Len()) {
		t.Fatalf("digest %s size %d, want %s size %d", a.Digest, *a.Size, got, want.Len())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(spill); !os.IsNotExist(err) {
		t.Fatalf("the spilled content is still there: %v", err)
	}
}

// Between two directory walks, what leaves the history is removed without a walk; a file the
// history never held stays until the walk that follows the retention TTL.
func TestCollectRemovesWhatLeftTheHistory(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	s.ArtifactRetentionTTL = time.Hour
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}
	var history []kclv1.ArtifactHistoryEntry
	for _, c := range []string{"one", "two", "three"} {
		a, _, err := s.Publish(obj, "main", "all.yaml", contentOf(t, "kind: ConfigMap\nname: "+c+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		history = append([]kclv1.ArtifactHistoryEntry{{Digest: a.Digest, URL: a.URL}}, history...)
		if len(history) == 1 {
			if _, err := s.Collect(obj, history); err != nil { // the first walk
				t.Fatal(err)
			}
			leftover := filepath.Join(filepath.Dir(s.LocalPath(*a)), "leftover.tar.gz")
			if err := os.WriteFile(leftover, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	gone := path.Base(history[2].URL)
	history = history[:2]
	deleted, err := s.Collect(obj, history)
	if err != nil {
		t.Fatal(err)
	}
	if len(deleted) != 1 || filepath.Base(deleted[0]) != gone {
		t.Fatalf("deleted %v, want only %s, the artifact that left the history", deleted, gone)
	}
	s.mu.Lock()
	c := s.collected[filepath.Dir(deleted[0])]
	c.at = time.Now().Add(-2 * time.Hour)
	s.collected[filepath.Dir(deleted[0])] = c
	s.mu.Unlock()
	history = history[:1]
	deleted, err = s.Collect(obj, history)
	if err != nil {
		t.Fatal(err)
	}
	names := storedNames(t, filepath.Dir(deleted[0]))
	want := []string{path.Base(history[0].URL), LatestName}
	slices.Sort(want)
	if len(deleted) != 2 || !slices.Equal(names, want) {
		t.Fatalf("deleted %v, left %v; want only %v left", deleted, names, want)
	}
}

func storedNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// Paths that leave the storage resolve to nothing, as Flux storage's do.
func TestLocalPathStaysInTheStorage(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"../x.tar.gz", "kclartifact/ns/../../../x", "/etc/passwd", ""} {
		if got := s.LocalPath(meta.Artifact{Path: p}); got != "" {
			t.Errorf("LocalPath(%q) = %q, want empty", p, got)
		}
	}
	if got := s.LocalPath(meta.Artifact{Path: "kclartifact/ns/a/x.tar.gz"}); got != filepath.Join(s.BasePath, "kclartifact/ns/a/x.tar.gz") {
		t.Errorf("LocalPath = %q", got)
	}
}
