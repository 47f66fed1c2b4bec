package server

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/artifact/config"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
)

// A real storage directory written by the artifact store, served as the controller serves it.
// start opens the store on root and serves it: called again, it is a restart of the controller.
type storage struct {
	t     *testing.T
	root  string
	store *artifactstore.Store
	srv   *httptest.Server
}

func newStorage(t *testing.T) *storage {
	st := &storage{t: t, root: t.TempDir()}
	st.start()
	return st
}

func (st *storage) start() {
	st.t.Helper()
	if st.srv != nil {
		st.srv.Close()
	}
	s, err := artifactstore.New(&config.Options{StoragePath: st.root, StorageAddress: "127.0.0.1:0", StorageAdvAddress: "127.0.0.1:0"})
	if err != nil {
		st.t.Fatal(err)
	}
	h, err := HandlerWithOptions(s, Options{})
	if err != nil {
		st.t.Fatal(err)
	}
	st.store, st.srv = s, httptest.NewServer(h)
	st.t.Cleanup(st.srv.Close)
}

// publish stores content as the artifact of ns/name and makes it its latest, with its URL set.
func (st *storage) publish(ns, name, content string) meta.Artifact {
	st.t.Helper()
	c := artifactstore.NewContent()
	c.Write([]byte(content))
	defer c.Close()
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	a, _, err := st.store.Publish(obj, "main", "manifests.yaml", c)
	if err != nil {
		st.t.Fatal(err)
	}
	st.store.SetArtifactURL(obj, a)
	return *a
}

// url is u (an artifact URL, or one built beside it) at the test server: its path and query kept.
func (st *storage) url(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		st.t.Fatal(err)
	}
	return st.srv.URL + p.RequestURI()
}

// sibling is the URL of file in the directory of the artifact URL u, with u's query.
func sibling(u, file string) string {
	p, _ := url.Parse(u)
	p.Path = p.Path[:strings.LastIndex(p.Path, "/")+1] + file
	return p.String()
}

func (st *storage) bytesOf(a meta.Artifact) []byte {
	b, err := os.ReadFile(st.store.LocalPath(a))
	if err != nil {
		st.t.Fatal(err)
	}
	return b
}

// expect404 checks that u answers 404 with a body that says why, and none of the bytes of foreign.
func (st *storage) expect404(u, why string, foreign ...[]byte) {
	st.t.Helper()
	code, body, _ := get(st.t, st.url(u))
	if code != http.StatusNotFound || !strings.Contains(body, why) {
		st.t.Errorf("GET %s: %d, want 404 saying %q; body %.80q", u, code, why, body)
	}
	for _, f := range foreign {
		if strings.Contains(body, string(f)) {
			st.t.Errorf("GET %s served bytes it must not (damaged, or another artifact's)", u)
		}
	}
}

func TestFlippedBytesAreNotServedAfterARestart(t *testing.T) {
	st := newStorage(t)
	a := st.publish("ns", "app", "kind: ConfigMap\n")
	b := st.bytesOf(a)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(st.store.LocalPath(a), b, 0o600); err != nil {
		t.Fatal(err)
	}
	st.start()
	st.expect404(a.URL, "damaged", b)
	st.expect404(sibling(a.URL, artifactstore.LatestName), "damaged", b)
	st.expect404(sibling(a.URL, "latest.yaml"), "damaged")
}

func TestTruncatedFileIsNotServedAfterARestart(t *testing.T) {
	st := newStorage(t)
	a := st.publish("ns", "app", "kind: ConfigMap\n")
	b := st.bytesOf(a)
	if err := os.Truncate(st.store.LocalPath(a), int64(len(b)/2)); err != nil {
		t.Fatal(err)
	}
	st.start()
	st.expect404(a.URL, "damaged", b[:len(b)/2])
}

// A file changed while the server runs is verified again before it is served: here a damaged
// copy renamed over it, with the same size and modification time.
func TestAFileReplacedWhileServingIsVerifiedAgain(t *testing.T) {
	st := newStorage(t)
	a := st.publish("ns", "app", "kind: ConfigMap\n")
	if code, _, _ := get(t, st.url(a.URL)); code != http.StatusOK {
		t.Fatalf("GET %s: %d before any damage", a.URL, code)
	}
	p := st.store.LocalPath(a)
	fi, _ := os.Stat(p)
	b := st.bytesOf(a)
	b[len(b)/2] ^= 0xff
	tmp := p + ".damaged"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(tmp, fi.ModTime(), fi.ModTime())
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	st.expect404(a.URL, "damaged", b)
}

func TestASymlinkToAnotherNamespacesArtifactIsNotServed(t *testing.T) {
	st := newStorage(t)
	mine := st.publish("tenant-a", "app", "kind: ConfigMap\nmetadata: {name: a}\n")
	theirs := st.publish("tenant-b", "app", "kind: Secret\nmetadata: {name: b}\n")
	p := st.store.LocalPath(mine)
	os.Remove(p)
	if err := os.Symlink(st.store.LocalPath(theirs), p); err != nil {
		t.Fatal(err)
	}
	st.start()
	foreign := st.bytesOf(theirs)
	st.expect404(mine.URL, "not a regular file", foreign)
	st.expect404(sibling(mine.URL, artifactstore.LatestName), "not a regular file", foreign)
	st.expect404(sibling(mine.URL, "latest.yaml"), "not a regular file", []byte("kind: Secret"))
}

// A latest link pointed at another namespace's artifact while the controller was stopped is
// put back before the first request: the store's own record says what is current.
func TestLatestRepointedAtAnotherNamespaceIsRepairedAtStart(t *testing.T) {
	st := newStorage(t)
	mine := st.publish("tenant-a", "app", "kind: ConfigMap\nmetadata: {name: a}\n")
	theirs := st.publish("tenant-b", "app", "kind: Secret\nmetadata: {name: b}\n")
	link := filepath.Join(filepath.Dir(st.store.LocalPath(mine)), artifactstore.LatestName)
	os.Remove(link)
	if err := os.Symlink(st.store.LocalPath(theirs), link); err != nil {
		t.Fatal(err)
	}
	st.start()
	if target, err := os.Readlink(link); err != nil || filepath.Base(target) != filepath.Base(st.store.LocalPath(mine)) ||
		(filepath.IsAbs(target) && filepath.Dir(target) != filepath.Dir(link)) {
		t.Errorf("after the restart, latest points at %q (%v), want %s", target, err, filepath.Base(st.store.LocalPath(mine)))
	}
	code, body, _ := get(t, st.url(sibling(mine.URL, artifactstore.LatestName)))
	if code != http.StatusOK || body != string(st.bytesOf(mine)) {
		t.Errorf("latest of tenant-a: %d, %d bytes; want its own artifact", code, len(body))
	}
	code, body, _ = get(t, st.url(sibling(mine.URL, "latest.yaml")))
	if code != http.StatusOK || strings.Contains(body, "Secret") {
		t.Errorf("latest.yaml of tenant-a: %d %q", code, body)
	}
}

func TestAMissingHistoryEntryAnswers404SayingSo(t *testing.T) {
	st := newStorage(t)
	old := st.publish("ns", "app", "kind: ConfigMap\ndata: {v: '1'}\n")
	st.publish("ns", "app", "kind: ConfigMap\ndata: {v: '2'}\n")
	if err := os.Remove(st.store.LocalPath(old)); err != nil {
		t.Fatal(err)
	}
	st.start()
	st.expect404(old.URL, "missing")
	st.expect404(sibling(old.URL, strings.TrimSuffix(filepathBase(old.URL), ".tar.gz")+".yaml"), "missing")
}

func filepathBase(u string) string {
	p, _ := url.Parse(u)
	return filepath.Base(p.Path)
}

// The storage address serves nothing to a URL derived from public names: every URL carries the
// object's token, which only the controller can compute.
func TestURLsWithoutTheTokenAnswer404(t *testing.T) {
	st := newStorage(t)
	a := st.publish("ns", "app", "kind: ConfigMap\n")
	other := st.publish("other", "app", "kind: ConfigMap\n")
	plain, _ := url.Parse(a.URL)
	plain.RawQuery = ""
	for _, u := range []string{plain.String(), sibling(plain.String(), artifactstore.LatestName),
		sibling(plain.String(), "latest.yaml"), sibling(plain.String(), "diff")} {
		st.expect404(u, "not found")
	}
	wrong, _ := url.Parse(a.URL)
	wrong.RawQuery = url.Values{"token": {strings.Repeat("0", 64)}}.Encode()
	st.expect404(wrong.String(), "not found")
	// another object's token opens only that object's artifacts
	stolen, _ := url.Parse(a.URL)
	stolen.RawQuery = mustParse(t, other.URL).RawQuery
	if stolen.RawQuery == "" {
		t.Fatal("artifact URLs carry no token")
	}
	st.expect404(stolen.String(), "not found")

	code, body, _ := get(t, st.url(a.URL))
	if code != http.StatusOK || body != string(st.bytesOf(a)) {
		t.Errorf("GET with the token: %d, %d bytes", code, len(body))
	}
	if code, _, _ := get(t, st.url(sibling(a.URL, "latest.yaml"))); code != http.StatusOK {
		t.Errorf("latest.yaml with the token: %d", code)
	}
}

func mustParse(t *testing.T, u string) *url.URL {
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestURLsDieWithTheirObject (issue 54): after a KCLArtifact is deleted and another owner creates
// one of the same name, the deleted one's URLs (latest.yaml, its archive, diff) answer 404 for
// good, and the new object's URLs differ and serve its artifact.
func TestURLsDieWithTheirObject(t *testing.T) {
	st := newStorage(t)
	publish := func(uid, content string) (*kclv1.KCLArtifact, *meta.Artifact) {
		t.Helper()
		obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns", UID: types.UID(uid)}}
		c := artifactstore.NewContent()
		c.Write([]byte(content))
		defer c.Close()
		a, _, err := st.store.Publish(obj, "main", "manifests.yaml", c)
		if err != nil {
			t.Fatal(err)
		}
		return obj, a
	}
	old, oldArt := publish("3f0a-old", "kind: ConfigMap\nmetadata: {name: first-owner}\n")
	oldLatest := artifactstore.Sibling(oldArt.URL, "latest.yaml")
	if code, body, _ := get(t, st.url(oldLatest)); code != http.StatusOK || !strings.Contains(body, "first-owner") {
		t.Fatalf("the first owner's latest.yaml: %d %q", code, body)
	}
	// kubectl delete kclartifact app: the finalizer removes its artifacts
	if err := st.store.RemoveAll(old); err != nil {
		t.Fatal(err)
	}
	_, newArt := publish("9c1b-new", "kind: ConfigMap\nmetadata: {name: second-owner}\n")
	newLatest := artifactstore.Sibling(newArt.URL, "latest.yaml")
	if artifactstore.TokenOf(newArt.URL) == artifactstore.TokenOf(oldArt.URL) {
		t.Errorf("the new object's URL carries the deleted one's token: %s", newArt.URL)
	}
	for _, u := range []string{oldLatest, oldArt.URL, artifactstore.Sibling(oldArt.URL, "latest.tar.gz"), artifactstore.Sibling(oldArt.URL, "diff")} {
		if code, body, _ := get(t, st.url(u)); code != http.StatusNotFound || strings.Contains(body, "second-owner") {
			t.Errorf("GET %s (the deleted object's): %d %q; want 404", u, code, body)
		}
	}
	if code, body, _ := get(t, st.url(newLatest)); code != http.StatusOK || !strings.Contains(body, "second-owner") {
		t.Errorf("the new owner's latest.yaml: %d %q", code, body)
	}
	// and after a restart of the controller
	st.start()
	if code, _, _ := get(t, st.url(oldLatest)); code != http.StatusNotFound {
		t.Errorf("after a restart, the deleted object's latest.yaml: %d; want 404", code)
	}
	if code, body, _ := get(t, st.url(newLatest)); code != http.StatusOK || !strings.Contains(body, "second-owner") {
		t.Errorf("after a restart, the new owner's latest.yaml: %d %q", code, body)
	}
}
