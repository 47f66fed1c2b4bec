package artifactstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/artifact/config"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	n, err := New(&config.Options{StoragePath: s.BasePath, StorageAddress: "127.0.0.1:0", StorageAdvAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// appIn is the KCLArtifact ns/app of UID uid.
func appIn(ns, uid string) *kclv1.KCLArtifact {
	return &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns, UID: types.UID(uid)}}
}

func publishIn(t *testing.T, s *Store, ns, content string) *meta.Artifact {
	t.Helper()
	a, _, err := s.Publish(appIn(ns, "uid-"+ns), "main", "all.yaml", contentOf(t, content))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Check says what became of an artifact, for the controller's messages: missing, damaged (its
// bytes changed, or another digest than the one asked for) or not a regular file.
func TestCheckSaysWhyAnArtifactIsNotServed(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	mine := publishIn(t, s, "a", "kind: ConfigMap\n")
	theirs := publishIn(t, s, "b", "kind: Secret\n")
	if err := s.Check(*mine); err != nil {
		t.Fatalf("a stored artifact: %v", err)
	}
	wrongDigest := *mine
	wrongDigest.Digest = theirs.Digest
	p := s.LocalPath(*mine)
	b, _ := os.ReadFile(p)
	for _, c := range []struct {
		what   string
		damage func()
		art    meta.Artifact
		want   error
	}{
		{"another digest asked for", func() {}, wrongDigest, ErrDamaged},
		{"flipped bytes", func() { b[len(b)/2] ^= 1; os.WriteFile(p, b, 0o600) }, *mine, ErrDamaged},
		{"a link to another namespace's artifact", func() { os.Remove(p); os.Symlink(s.LocalPath(*theirs), p) }, *mine, ErrNotAFile},
		{"removed", func() { os.Remove(p) }, *mine, ErrMissing},
		{"a path outside KCLArtifacts", func() {}, meta.Artifact{Path: "gitrepository/a/app/x.tar.gz"}, ErrMissing},
	} {
		c.damage()
		s = reopen(t, s) // a restart: nothing verified before is trusted
		if err := s.Check(c.art); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, err, c.want)
		}
	}
}

// A file is hashed once while its size, modification time and inode stay, and again when they change.
func TestOpenVerifiesOnceUntilTheFileChanges(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	a := publishIn(t, s, "ns", "kind: ConfigMap\n")
	s = reopen(t, s)
	open := func() error {
		f, _, err := s.Open("ns", "app", LatestName)
		if err == nil {
			f.Close()
		}
		return err
	}
	if err := open(); err != nil {
		t.Fatal(err)
	}
	p := s.LocalPath(*a)
	s.mu.Lock()
	stamp, ok := s.verified[p]
	s.mu.Unlock()
	if !ok || stamp.digest != a.Digest || stamp.inode == 0 {
		t.Fatalf("no verified stamp after the first open: %+v", stamp)
	}
	// An unchanged stamp is trusted without hashing: bytes changed in place, with the size,
	// time and inode put back, still open (this is what a request costs: a stat, no hash).
	fi, _ := os.Stat(p)
	b, _ := os.ReadFile(p)
	b[len(b)-1] ^= 1
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(p, fi.ModTime(), fi.ModTime())
	if err := open(); err != nil {
		t.Fatalf("an unchanged stamp was hashed again: %v", err)
	}
	// A file renamed over it (how anything replaces a file atomically) has another inode.
	os.WriteFile(p+".new", b, 0o600)
	os.Chtimes(p+".new", fi.ModTime(), fi.ModTime())
	os.Rename(p+".new", p)
	if err := open(); !errors.Is(err, ErrDamaged) {
		t.Fatalf("a replaced file: %v, want damaged", err)
	}
}

func TestLatestIsRebuiltFromTheRecordAtStart(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	mine := publishIn(t, s, "a", "kind: ConfigMap\n")
	theirs := publishIn(t, s, "b", "kind: Secret\n")
	link := filepath.Join(filepath.Dir(s.LocalPath(*mine)), LatestName)
	os.Remove(link)
	os.Symlink(s.LocalPath(*theirs), link)
	// another directory's latest removed, and one whose object has no current artifact
	os.Remove(filepath.Join(filepath.Dir(s.LocalPath(*theirs)), LatestName))
	s = reopen(t, s)
	for art, want := range map[*meta.Artifact]string{mine: filepath.Base(s.LocalPath(*mine)), theirs: filepath.Base(s.LocalPath(*theirs))} {
		got, err := os.Readlink(filepath.Join(filepath.Dir(s.LocalPath(*art)), LatestName))
		if err != nil || got != want {
			t.Errorf("latest of %s: %q %v, want %q", art.Path, got, err, want)
		}
	}
}

// Storage an earlier release wrote has no record: its regular files are taken as found, the
// latest link only when it names one of them in the same directory.
func TestAStorageWithoutRecordsIsAdoptedAsFound(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	mine := publishIn(t, s, "a", "kind: ConfigMap\n")
	theirs := publishIn(t, s, "b", "kind: Secret\n")
	dirA, dirB := filepath.Dir(s.LocalPath(*mine)), filepath.Dir(s.LocalPath(*theirs))
	for _, d := range []string{dirA, dirB} {
		os.Remove(filepath.Join(d, recordName))
	}
	// an earlier release's absolute link, and one to another namespace
	os.Remove(filepath.Join(dirA, LatestName))
	os.Symlink(s.LocalPath(*mine), filepath.Join(dirA, LatestName))
	os.Remove(filepath.Join(dirB, LatestName))
	os.Symlink(s.LocalPath(*mine), filepath.Join(dirB, LatestName))
	s = reopen(t, s)
	if err := s.Check(*mine); err != nil {
		t.Errorf("an earlier release's artifact: %v", err)
	}
	if f, _, err := s.Open("b", "app", LatestName); err == nil || !errors.Is(err, ErrMissing) {
		if f != nil {
			f.Close()
		}
		t.Errorf("a latest link out of its directory was taken: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dirB, LatestName)); err == nil {
		t.Error("the foreign latest link was left in place")
	}
}

func TestURLsCarryATokenOfTheirObject(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	a := publishIn(t, s, "a", "kind: ConfigMap\n")
	tok := TokenOf(a.URL)
	if tok == "" || !s.ValidToken("a", "app", tok) || s.ValidToken("b", "app", tok) || s.ValidToken("a", "app", "") {
		t.Fatalf("URL %s: token %q", a.URL, tok)
	}
	fi, err := os.Stat(filepath.Join(s.BasePath, KeyFileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if again := reopen(t, s); again.Token("a", "app", "uid-a") != tok || !again.ValidToken("a", "app", tok) {
		t.Error("the token changed across a restart")
	}
	if err := s.SetURLKey([]byte("short")); err == nil {
		t.Error("a short key was taken")
	}
	if err := s.SetURLKey([]byte(strings.Repeat("k", 32))); err != nil || s.Token("a", "app", "uid-a") == tok || s.ValidToken("a", "app", tok) {
		t.Errorf("a given key: %v", err)
	}
	if got := Sibling(a.URL, "latest.yaml"); !strings.HasSuffix(got, "/kclartifact/a/app/latest.yaml?token="+tok) {
		t.Errorf("Sibling: %s", got)
	}
}

// What the controller publishes can come from the store's record: a forged status naming
// another namespace's artifact is told apart before anything is read.
func TestCurrentAndCheckForComeFromTheStoresRecord(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	a := appIn("a", "uid-a")
	mine := publishIn(t, s, "a", "kind: ConfigMap\n")
	theirs := publishIn(t, s, "b", "kind: Secret\n")
	if err := s.CheckFor(a, *theirs); !errors.Is(err, ErrForeign) {
		t.Errorf("another namespace's artifact checked for a: %v", err)
	}
	if err := s.CheckFor(a, *mine); err != nil {
		t.Errorf("a's own artifact: %v", err)
	}
	s = reopen(t, s)
	cur, ok := s.Current(a)
	if !ok || cur.Path != mine.Path || cur.Digest != mine.Digest || *cur.Size != *mine.Size || cur.URL != mine.URL {
		t.Errorf("Current after a restart: %+v %v, want %+v", cur, ok, mine)
	}
	if _, ok := s.Recorded(a, "other.tar.gz"); ok {
		t.Error("a file the store did not write is recorded")
	}
}

// A URL dies with its object: deleted, its tokens are refused, and another object of the same
// name (another UID) gets other tokens. Its finalizer running late leaves the new one's artifacts.
func TestTokensCoverTheObjectsUID(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	first := appIn("a", "uid-1")
	a1, _, err := s.Publish(first, "main", "all.yaml", contentOf(t, "kind: ConfigMap\n"))
	if err != nil {
		t.Fatal(err)
	}
	tok1 := TokenOf(a1.URL)
	if !s.ValidToken("a", "app", tok1) || s.ValidToken("a", "app", s.Token("a", "app", "")) || tok1 != s.Token("a", "app", "uid-1") {
		t.Fatalf("the first object's token %s: not its own", tok1)
	}
	if err := s.RemoveAll(first); err != nil {
		t.Fatal(err)
	}
	if s.ValidToken("a", "app", tok1) {
		t.Error("a deleted object's token is still accepted")
	}
	second := appIn("a", "uid-2")
	a2, _, err := s.Publish(second, "main", "all.yaml", contentOf(t, "kind: Secret\n"))
	if err != nil {
		t.Fatal(err)
	}
	tok2 := TokenOf(a2.URL)
	if tok2 == tok1 || !s.ValidToken("a", "app", tok2) || s.ValidToken("a", "app", tok1) {
		t.Fatalf("tokens: first %s, second %s", tok1, tok2)
	}
	if again := reopen(t, s); !again.ValidToken("a", "app", tok2) || again.ValidToken("a", "app", tok1) {
		t.Error("after a restart, the tokens accepted changed")
	}
	// the first object's finalizer, late (a stale cache), leaves the second one's artifacts
	if err := s.RemoveAll(first); err != nil || !s.Present(a2) {
		t.Errorf("a late finalizer of the deleted object: %v, second's artifact present %v", err, s.Present(a2))
	}
}

// A directory left by a deleted object whose finalizer never ran (removed by hand) is emptied at
// the first reconcile of an object of the same name (DropForeign, Bind): none of its artifacts is
// checked as the new object's nor served at its URLs.
func TestBindEmptiesADeletedObjectsDirectory(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	a1, _, err := s.Publish(appIn("a", "uid-1"), "main", "all.yaml", contentOf(t, "kind: ConfigMap\n"))
	if err != nil {
		t.Fatal(err)
	}
	second := appIn("a", "uid-2")
	if err := s.DropForeign(appIn("a", "uid-1")); err != nil || !s.Present(a1) {
		t.Fatalf("DropForeign of the owner itself: %v, present %v", err, s.Present(a1))
	}
	if err := s.DropForeign(second); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckFor(second, *a1); err == nil {
		t.Error("the deleted object's artifact checks as the new object's")
	}
	if err := s.Bind(second); err != nil {
		t.Fatal(err)
	}
	if s.Present(a1) || s.ValidToken("a", "app", TokenOf(a1.URL)) || !s.ValidToken("a", "app", s.Token("a", "app", "uid-2")) {
		t.Error("the deleted object's artifacts or token survived the new object's bind")
	}
	if _, ok := s.Current(second); ok {
		t.Error("the new object has a current artifact it did not store")
	}
	// nothing stored: nothing to bind, no directory made
	if err := s.Bind(appIn("c", "uid-3")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.BasePath, "kclartifact", "c")); !os.IsNotExist(err) {
		t.Errorf("Bind made a directory for an object with nothing stored: %v", err)
	}
}

// Storage of an earlier release (a record without UID) keeps its URLs, tokens without UID, until
// the object's next reconcile binds it: then only the new URLs work, across restarts too.
func TestEarlierReleaseTokensWorkUntilBound(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	legacy := appIn("a", "") // what an earlier release published: no UID in the token or record
	a, _, err := s.Publish(legacy, "main", "all.yaml", contentOf(t, "kind: ConfigMap\n"))
	if err != nil {
		t.Fatal(err)
	}
	old := TokenOf(a.URL)
	if old != s.Token("a", "app", "") || !s.ValidToken("a", "app", old) {
		t.Fatalf("an earlier release's token %s refused", old)
	}
	s = reopen(t, s)
	if !s.ValidToken("a", "app", old) {
		t.Fatal("an earlier release's token refused after the upgrade's restart, before the reconcile")
	}
	obj := appIn("a", "uid-1")
	// until bound, the URLs the store gives out for the object are those of the earlier release:
	// those the server answers (a failing object, which publishes nothing, keeps them)
	if before, ok := s.Current(obj); !ok || TokenOf(before.URL) != old {
		t.Fatalf("before the bind, the object's URL %s; want the earlier release's token", before.URL)
	}
	if err := s.Bind(obj); err != nil {
		t.Fatal(err)
	}
	cur, ok := s.Current(obj)
	if !ok || !s.Present(&cur) {
		t.Fatal("binding an earlier release's directory lost its artifact")
	}
	if s.ValidToken("a", "app", old) || !s.ValidToken("a", "app", TokenOf(cur.URL)) || TokenOf(cur.URL) != s.Token("a", "app", "uid-1") {
		t.Errorf("after the bind: old token accepted %v, new URL %s", s.ValidToken("a", "app", old), cur.URL)
	}
	if again := reopen(t, s); again.ValidToken("a", "app", old) || !again.ValidToken("a", "app", TokenOf(cur.URL)) {
		t.Error("the bind did not survive a restart")
	}
}

// Rotating the key: with the old key as the previous one, the URLs published before keep working
// while every new URL carries the new key's token; without it, they stop.
func TestPreviousKeyDuringRotation(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	oldKey, newKey := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
	if err := s.SetURLKey(oldKey); err != nil {
		t.Fatal(err)
	}
	a := publishIn(t, s, "a", "kind: ConfigMap\n")
	before := TokenOf(a.URL)
	if err := s.SetURLKey(newKey); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPreviousURLKey(oldKey); err != nil {
		t.Fatal(err)
	}
	after := TokenOf(s.URL(appIn("a", "uid-a"), "latest.yaml"))
	if after == before || !s.ValidToken("a", "app", before) || !s.ValidToken("a", "app", after) {
		t.Fatalf("during the grace period: before %s, after %s", before, after)
	}
	if err := s.SetPreviousURLKey(nil); err != nil {
		t.Fatal(err)
	}
	if s.ValidToken("a", "app", before) || !s.ValidToken("a", "app", after) {
		t.Error("after the grace period, the old key's token is still accepted")
	}
	if err := s.SetPreviousURLKey([]byte("short")); err == nil {
		t.Error("a short previous key was taken")
	}
}
