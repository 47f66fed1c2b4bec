package artifactstore

import (
	"bytes"
	"os"
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

// What leaves the history stays for the retention TTL, counted from when it left (not from when
// it was written: an artifact published long ago may be current until a moment ago), and so does
// a file the history never held; then the next collection removes it.
func TestCollectKeepsWhatLeftTheHistoryForTheTTL(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { return clock }
	s.ArtifactRetentionTTL = time.Hour
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}
	var history []kclv1.ArtifactHistoryEntry
	var dir string
	for _, c := range []string{"one", "two"} {
		a, _, err := s.Publish(obj, "main", "all.yaml", contentOf(t, "kind: ConfigMap\nname: "+c+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		history = append([]kclv1.ArtifactHistoryEntry{{Digest: a.Digest, URL: a.URL}}, history...)
		dir = filepath.Dir(s.LocalPath(*a))
	}
	if err := os.WriteFile(filepath.Join(dir, "leftover.tar.gz"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	one, two := FileName(history[1].URL), FileName(history[0].URL)
	history = history[:1] // historyLimit 1: "one" leaves as "two" is published
	deleted, next, err := s.Collect(obj, history)
	if err != nil || len(deleted) != 0 || !next.Equal(clock.Add(time.Hour)) {
		t.Fatalf("right after: deleted %v, next %s, %v; want nothing deleted, next in an hour", deleted, next, err)
	}
	clock = clock.Add(59 * time.Minute)
	if deleted, _, _ := s.Collect(obj, history); len(deleted) != 0 || !slices.Contains(storedNames(t, dir), one) {
		t.Fatalf("within the TTL: deleted %v", deleted)
	}
	clock = clock.Add(2 * time.Minute)
	deleted, next, err = s.Collect(obj, history)
	if err != nil || len(deleted) != 2 || !next.IsZero() {
		t.Fatalf("after the TTL: deleted %v, next %s, %v; want %s and the leftover deleted", deleted, next, err, one)
	}
	want := []string{two, LatestName}
	slices.Sort(want)
	if names := storedNames(t, dir); !slices.Equal(names, want) {
		t.Fatalf("left %v, want %v", names, want)
	}
	if deleted, next, _ := s.Collect(obj, history); len(deleted) != 0 || !next.IsZero() {
		t.Fatalf("nothing left to collect: deleted %v, next %s", deleted, next)
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
		if e.Name() != recordName {
			names = append(names, e.Name())
		}
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

// An object with nothing stored yet (a stage whose first artifact waits) has nothing to collect:
// no error, which the reconcile would log as one.
func TestCollectWithNothingStored(t *testing.T) {
	s, err := newStore(t, "")
	if err != nil {
		t.Fatal(err)
	}
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "waiting", UID: "u"}}
	deleted, next, err := s.Collect(obj, nil)
	if err != nil || len(deleted) != 0 || !next.IsZero() {
		t.Fatalf("Collect of an object with nothing stored: %v, %v, %v", deleted, next, err)
	}
}
