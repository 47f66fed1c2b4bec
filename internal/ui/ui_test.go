package ui

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/artifact/config"
	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
)

const (
	secretV1 = "s3cr3t-value-one"
	secretV2 = "s3cr3t-value-two"
	// evil is untrusted text: it must reach the page escaped, never as markup.
	evil = `<script>alert("owned")</script>`
)

// manifestsV renders the objects of revision v of the test program.
func manifestsV(ns, version, secret string, extra bool) string {
	s := `apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
  namespace: ` + ns + `
data:
  greeting: '` + evil + `'
  version: "` + version + `"
---
apiVersion: v1
kind: Secret
metadata:
  name: app-secret
  namespace: ` + ns + `
data:
  password: ` + base64.StdEncoding.EncodeToString([]byte(secret)) + `
stringData:
  token: plain-` + secret + `
`
	if extra {
		s += `---
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-extra
  namespace: ` + ns + `
data:
  replicas: "3"
`
	}
	return s
}

// fixture is a storage root with KCLArtifacts in a fake cache:
//   - team-a/app: two artifacts, the second current (version 2, a new object, a changed Secret);
//   - team-a/broken: an artifact, then a failed render whose message holds markup;
//   - team-b/elsewhere: served by another instance (no directory here).
type fixture struct {
	root       string
	reader     *fakeReader
	app        *kclv1.KCLArtifact
	v1, v2     kclv1.ArtifactHistoryEntry
	brokenNote string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{root: t.TempDir()}
	t0 := time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)

	f.app = newObj("team-a", "app")
	f.v1 = storeArtifact(t, f.root, f.app, "main@sha1:1111111111111111111111111111111111111111", manifestsV("team-a", "1", secretV1, false), 2, t0)
	f.v2 = storeArtifact(t, f.root, f.app, "main@sha1:2222222222222222222222222222222222222222", manifestsV("team-a", "2", secretV2, true), 3, t0.Add(time.Hour))
	publish(f.app, f.v2, f.v1)
	setReady(f.app, metav1.ConditionTrue, meta.SucceededReason, "stored artifact for revision '"+f.v2.Revision+"'")

	broken := newObj("team-a", "broken")
	b1 := storeArtifact(t, f.root, broken, "main@sha1:3333333333333333333333333333333333333333", manifestsV("team-a", "b1", secretV1, false), 2, t0)
	publish(broken, b1)
	broken.Status.LastAttemptedRevision = "main@sha1:4444444444444444444444444444444444444444"
	f.brokenNote = "error[E2G22]: TypeError\n --> main.k:3:1\n  |\n3 | x: int = \"" + evil + "\"\n  | expected int, got str"
	setReady(broken, metav1.ConditionFalse, kclv1.RenderFailedReason, f.brokenNote)

	elsewhere := newObj("team-b", "elsewhere")
	elsewhere.Status.Artifact = f.app.Status.Artifact.DeepCopy()
	f.reader = &fakeReader{objs: []*kclv1.KCLArtifact{f.app, broken, elsewhere}}
	return f
}

func (f *fixture) server(t *testing.T, o Options) *httptest.Server {
	t.Helper()
	o.Reader, o.StorageRoot, o.Log = f.reader, f.root, testr.New(t)
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// get returns the status and body of a GET, following no redirect.
func get(t *testing.T, srv *httptest.Server, path string) (int, http.Header, string) {
	t.Helper()
	return do(t, srv, http.MethodGet, path)
}

func do(t *testing.T, srv *httptest.Server, method, path string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// text is the page's text with tags removed and entities decoded, to look for what a reader
// sees.
func text(page string) string {
	return html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(page, ""))
}

func expectContains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q", what, sub)
		}
	}
}

func expectNotContains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			t.Errorf("%s contains %q", what, sub)
		}
	}
}

// expectEscaped checks that the untrusted markup reached the page as text only: the pages
// have no script element of their own, so any "<script" is an injection.
func expectEscaped(t *testing.T, what, page string) {
	t.Helper()
	if strings.Contains(strings.ToLower(page), "<script") {
		t.Errorf("%s holds a <script> element: untrusted text was not escaped", what)
	}
}

func TestIndexListsTheKCLArtifactsServedHere(t *testing.T) {
	f := newFixture(t)
	srv := f.server(t, Options{})
	code, hdr, page := get(t, srv, "/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d\n%s", code, page)
	}
	if ct := hdr.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	txt := text(page)
	expectContains(t, "the list", txt, "team-a", "app", "broken", f.v2.Revision, f.v2.SourceRevision,
		"RenderFailed", "error[E2G22]: TypeError …", "2025-03-04 11:00:00 UTC",
		"main@sha1:4444444444444444444444444444444444444444") // broken: the revision last tried
	expectContains(t, "the list", page, `href="/kclartifact/team-a/app/"`, `href="/kclartifact/team-a/broken/"`)
	expectNotContains(t, "the list", txt, "elsewhere", f.v1.Revision)
	expectContains(t, "the list", txt, "3 KCLArtifacts in all")
	expectEscaped(t, "the list", page)
}

func TestArtifactPageShowsStatusHistoryObjectsAndTheLastChange(t *testing.T) {
	f := newFixture(t)
	srv := f.server(t, Options{})
	code, _, page := get(t, srv, "/kclartifact/team-a/app/")
	if code != http.StatusOK {
		t.Fatalf("GET: %d\n%s", code, page)
	}
	txt := text(page)
	expectContains(t, "the page", txt, "team-a /", "app", f.v1.Revision, f.v2.Revision, f.v1.SourceRevision,
		f.v2.SourceRevision, "current", "GitRepository team-a/repo")
	// objects of the current artifact, in the order of the artifact, with their YAML
	expectContains(t, "the object list", between(t, page, `id="object-table"`, `</table>`),
		"app-config", "app-secret", "app-extra", "ConfigMap", "Secret")
	expectContains(t, "the YAML", txt, `version: "2"`, `replicas: "3"`)
	// the diff defaults to the previous artifact against the current one
	expectContains(t, "the diff", txt, "1 added", "0 removed", "2 changed", "0 unchanged")
	expectDiffLines(t, page, []diffLine{
		{"del", `-  version: "1"`}, {"add", `+  version: "2"`}, {"add", "+  name: app-extra"},
		{"add", `+  password: '*** (changed)'`},
	})
	expectContains(t, "the diff", between(t, page, `id="diff-from"`, `</code>`), f.v1.Revision)
	expectContains(t, "the diff", between(t, page, `id="diff-to"`, `</code>`), f.v2.Revision)
	// the history downloads from this listener
	expectContains(t, "the history", page, `href="`+archiveFile(f.v1)+`"`, `href="`+archiveFile(f.v2)+`"`)
}

// expectDiffLines checks that the diff holds each line, coloured as its class says.
func expectDiffLines(t *testing.T, page string, want []diffLine) {
	t.Helper()
	got := map[diffLine]bool{}
	for _, m := range regexp.MustCompile(`<span class="(add|del|hunk|ctx)">([^<]*)</span>`).FindAllStringSubmatch(page, -1) {
		got[diffLine{Class: m[1], Text: html.UnescapeString(m[2])}] = true
	}
	for _, l := range want {
		if !got[l] {
			t.Errorf("the diff has no %s line %q; it has %v", l.Class, l.Text, got)
		}
	}
}

// between is the part of s from the first start to the next end.
func between(t *testing.T, s, start, end string) string {
	t.Helper()
	_, after, ok := strings.Cut(s, start)
	if !ok {
		t.Fatalf("no %q in the page", start)
	}
	in, _, _ := strings.Cut(after, end)
	return in
}

func TestSecretValuesAreMaskedUnlessAskedFor(t *testing.T) {
	f := newFixture(t)
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, path := range []string{"/kclartifact/team-a/app/", "/kclartifact/team-a/app/?view=" + url.QueryEscape(f.v1.Digest)} {
		_, _, page := get(t, f.server(t, Options{}), path)
		txt := text(page)
		expectNotContains(t, "GET "+path, page, secretV1, secretV2, enc(secretV1), enc(secretV2))
		expectContains(t, "GET "+path, txt, "password: '***'", "token: '***'")
	}
	_, _, page := get(t, f.server(t, Options{ShowSecrets: true}), "/kclartifact/team-a/app/")
	expectContains(t, "the page with --show-secret-values", text(page), enc(secretV2), "plain-"+secretV2,
		"-  password: "+enc(secretV1), "Secret values shown")
}

func TestUntrustedTextIsEscaped(t *testing.T) {
	f := newFixture(t)
	srv := f.server(t, Options{ShowSecrets: true})
	for _, path := range []string{"/", "/kclartifact/team-a/app/", "/kclartifact/team-a/broken/"} {
		code, hdr, page := get(t, srv, path)
		if code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
		expectEscaped(t, "GET "+path, page)
		if csp := hdr.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q, want no scripts at all", path, csp)
		}
	}
	_, _, page := get(t, srv, "/kclartifact/team-a/broken/")
	// the whole message, every line of it, as text
	expectContains(t, "the Ready message", text(between(t, page, `id="ready-message"`, `</pre>`)), f.brokenNote)
	_, _, page = get(t, srv, "/kclartifact/team-a/app/")
	expectContains(t, "the YAML", text(page), "greeting: "+evil)
}

func TestCompareAnyTwoKeptArtifacts(t *testing.T) {
	f := newFixture(t)
	srv := f.server(t, Options{})
	q := "?from=" + url.QueryEscape(f.v2.Digest) + "&to=" + url.QueryEscape(f.v1.Digest)
	code, _, page := get(t, srv, "/kclartifact/team-a/app/"+q)
	if code != http.StatusOK {
		t.Fatalf("GET: %d\n%s", code, page)
	}
	expectContains(t, "the reversed diff", text(page), "0 added", "1 removed", "2 changed")
	expectDiffLines(t, page, []diffLine{{"del", `-  version: "2"`}, {"add", `+  version: "1"`}, {"del", "-  name: app-extra"}})
	// the form keeps the choice
	expectContains(t, "the compare form", page, `<option value="`+f.v2.Digest+`" selected>`)

	_, _, page = get(t, srv, "/kclartifact/team-a/app/?from="+url.QueryEscape(f.v1.Digest)+"&to="+url.QueryEscape(f.v1.Digest))
	expectContains(t, "a diff of an artifact with itself", text(page), "2 unchanged", "The two artifacts hold the same objects.")

	code, _, page = get(t, srv, "/kclartifact/team-a/app/?to=sha256:0000")
	if code != http.StatusNotFound {
		t.Errorf("an unknown digest: %d, want 404", code)
	}
	expectContains(t, "the page of an unknown digest", text(page), "to=sha256:0000 is not a kept artifact", f.v1.Digest)
}

func TestOneArtifactHasNothingToCompare(t *testing.T) {
	f := newFixture(t)
	code, _, page := get(t, f.server(t, Options{}), "/kclartifact/team-a/broken/")
	if code != http.StatusOK {
		t.Fatalf("GET: %d", code)
	}
	expectContains(t, "the page", text(page), "nothing to compare", "app-config", "main@sha1:4444444444444444444444444444444444444444")
}

func TestPinnedArtifact(t *testing.T) {
	f := newFixture(t)
	// pinned back to v1: v1 is current, v2 stays the newest entry
	f.app.Spec.PinnedDigest = f.v1.Digest
	publish(f.app, f.v1)
	f.app.Status.History = []kclv1.ArtifactHistoryEntry{f.v2, f.v1}
	code, _, page := get(t, f.server(t, Options{}), "/kclartifact/team-a/app/")
	if code != http.StatusOK {
		t.Fatalf("GET: %d", code)
	}
	hist := between(t, page, `id="history-table"`, `</table>`)
	rows := strings.Split(hist, "<tr")
	if len(rows) != 4 { // header part, thead row, two entries
		t.Fatalf("history rows: %d\n%s", len(rows), hist)
	}
	expectContains(t, "the pinned entry", rows[3], f.v1.Revision, "current", "pinned")
	expectNotContains(t, "the newest entry", rows[2], "current", "pinned")
	// the default diff shows what the rollback changed: newest to current
	expectContains(t, "the diff", between(t, page, `id="diff-from"`, `</code>`), f.v2.Revision)
	expectContains(t, "the diff", between(t, page, `id="diff-to"`, `</code>`), f.v1.Revision)
	expectDiffLines(t, page, []diffLine{{"del", `-  version: "2"`}, {"add", `+  version: "1"`}})
}

func TestNotFound(t *testing.T) {
	f := newFixture(t)
	srv := f.server(t, Options{})
	for _, path := range []string{
		"/kclartifact/team-a/nope/",      // no such KCLArtifact
		"/kclartifact/team-b/elsewhere/", // another instance serves it
		"/kclartifact/Team-A/app/",       // not a namespace name
		"/kclartifact/team-a/a%2F..%2F..%2Fapp/",
		"/kclartifact/team-a/app/" + strings.Repeat("0", 64) + ".tar.gz", // not kept
		"/kclartifact/team-a/app/..%2f..%2f..%2fetc%2fpasswd",
		"/kclartifact/team-a/app/latest.tar.gz",
		"/nothing/here",
	} {
		code, _, page := get(t, srv, path)
		if code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
		expectContains(t, "GET "+path, page, "<h1>Not found</h1>")
	}
	code, hdr, _ := get(t, srv, "/kclartifact/team-a/app")
	if code != http.StatusMovedPermanently || hdr.Get("Location") != "/kclartifact/team-a/app/" {
		t.Errorf("GET without the slash: %d to %q, want a redirect to the page", code, hdr.Get("Location"))
	}
}

func TestOnlyGetAndHead(t *testing.T) {
	f := newFixture(t)
	srv := f.server(t, Options{})
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		code, hdr, _ := do(t, srv, m, "/kclartifact/team-a/app/")
		if code != http.StatusMethodNotAllowed || hdr.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d Allow %q, want 405 GET, HEAD", m, code, hdr.Get("Allow"))
		}
	}
	code, _, body := do(t, srv, http.MethodHead, "/kclartifact/team-a/app/")
	if code != http.StatusOK || body != "" {
		t.Errorf("HEAD: %d with %d bytes, want 200 and no body", code, len(body))
	}
}

func TestDownloadKeptArtifact(t *testing.T) {
	f := newFixture(t)
	srv := f.server(t, Options{})
	code, hdr, body := get(t, srv, "/kclartifact/team-a/app/"+archiveFile(f.v1))
	if code != http.StatusOK {
		t.Fatalf("GET: %d", code)
	}
	want, err := os.ReadFile(filepath.Join(f.root, artifactstore.Dir(f.app), archiveFile(f.v1)))
	if err != nil {
		t.Fatal(err)
	}
	if body != string(want) {
		t.Errorf("downloaded %d bytes, not the archive's %d", len(body), len(want))
	}
	if ct := hdr.Get("Content-Type"); ct != "application/gzip" {
		t.Errorf("Content-Type %q", ct)
	}
}

func TestArtifactsLargerThanMaxYAMLAreRefused(t *testing.T) {
	f := newFixture(t)
	code, _, page := get(t, f.server(t, Options{MaxYAML: 200}), "/kclartifact/team-a/app/")
	if code != http.StatusOK {
		t.Fatalf("GET: %d", code)
	}
	expectContains(t, "the page", text(page), "is larger than the 200 B this view shows or compares", "download its .tar.gz instead")
	expectNotContains(t, "the page", text(page), `version: "2"`)
}

func TestMissingArchiveIsReported(t *testing.T) {
	f := newFixture(t)
	if err := os.Remove(filepath.Join(f.root, artifactstore.Dir(f.app), archiveFile(f.v1))); err != nil {
		t.Fatal(err)
	}
	code, _, page := get(t, f.server(t, Options{}), "/kclartifact/team-a/app/")
	if code != http.StatusOK {
		t.Fatalf("GET: %d", code)
	}
	expectContains(t, "the page", text(page), "artifact "+f.v1.Revision+" is no longer stored", `version: "2"`)
}

func TestStartServesUntilTheContextEnds(t *testing.T) {
	f := newFixture(t)
	h, err := New(Options{Reader: f.reader, StorageRoot: f.root})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Start(ctx, addr, h) }()
	var resp *http.Response
	for deadline := time.Now().Add(10 * time.Second); ; {
		if resp, err = http.Get("http://" + addr + "/"); err == nil || time.Now().After(deadline) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Start returned %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /: %d", resp.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start after the context ended: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return after the context ended")
	}
}

// Deploy phases show in the object list, on each object's YAML and in the diff, with objects
// that moved phase.
func TestPhasesAreShown(t *testing.T) {
	root := t.TempDir()
	obj := newObj("team-a", "phased")
	t0 := time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)
	job := "apiVersion: batch/v1\nkind: Job\nmetadata: {name: migrate, namespace: team-a, annotations: {kcl.contrib.fluxcd.io/phase: pre}}\nspec: {backoffLimit: %d}\n"
	v1 := storeArtifact(t, root, obj, "main@sha1:1111111111111111111111111111111111111111", fmt.Sprintf(job, 1)+
		"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: schema, namespace: team-a, annotations: {helm.sh/hook: pre-install}}\n", 2, t0)
	v2 := storeArtifact(t, root, obj, "main@sha1:2222222222222222222222222222222222222222", fmt.Sprintf(job, 2)+
		"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: schema, namespace: team-a}\n", 2, t0.Add(time.Hour))
	publish(obj, v2, v1)
	setReady(obj, metav1.ConditionTrue, meta.SucceededReason, "stored")
	f := &fixture{root: root, reader: &fakeReader{objs: []*kclv1.KCLArtifact{obj}}}
	code, _, page := get(t, f.server(t, Options{}), "/kclartifact/team-a/phased/")
	if code != http.StatusOK {
		t.Fatalf("GET: %d\n%s", code, page)
	}
	table := text(between(t, page, `id="object-table"`, `</table>`))
	expectContains(t, "the object list", table, "migratepre", "schemamain")
	expectContains(t, "the YAML", text(between(t, page, `id="yaml"`, `</main>`)), "Job team-a/migrate phase pre")
	diff := text(between(t, page, `id="diff-summary"`, `</main>`))
	expectContains(t, "the diff", diff, "Job team-a/migrate phase pre", "ConfigMap team-a/schema phase pre -> main")
}

// A value the KCLArtifact reads from a Secret is masked wherever the program put it, in the
// objects a page shows and in its diffs; --show-secret-values shows it; a page whose Secrets
// cannot be read is not built.
func TestValuesFromSecretsAreMaskedWhereverTheyLand(t *testing.T) {
	f := newFixture(t)
	sensitive := func(_ context.Context, ns, name string) ([]string, error) { return []string{evil}, nil }
	for _, path := range []string{"/kclartifact/team-a/app/", "/kclartifact/team-a/app/?view=" + url.QueryEscape(f.v1.Digest)} {
		_, _, page := get(t, f.server(t, Options{Sensitive: sensitive}), path)
		expectNotContains(t, "GET "+path, text(page), `alert("owned")`)
		expectContains(t, "GET "+path, text(page), "greeting: '***'")
	}
	_, _, page := get(t, f.server(t, Options{Sensitive: sensitive, ShowSecrets: true}), "/kclartifact/team-a/app/")
	expectContains(t, "the page with --show-secret-values", text(page), `alert("owned")`)
	failing := func(context.Context, string, string) ([]string, error) { return nil, errors.New("forbidden") }
	code, _, page := get(t, f.server(t, Options{Sensitive: failing}), "/kclartifact/team-a/app/")
	if code != http.StatusServiceUnavailable {
		t.Fatalf("Secrets unreadable: %d", code)
	}
	expectNotContains(t, "the refusal", text(page), `alert("owned")`)
}

// With the artifact store, the view shows and sends only bytes the store verified: a kept
// artifact replaced by a link to another namespace's, or damaged, is refused with the reason.
func TestDamagedOrLinkedArchivesAreNotShown(t *testing.T) {
	f := newFixture(t)
	dir := filepath.Join(f.root, artifactstore.Dir(f.app))
	foreign := filepath.Join(f.root, "kclartifact", "team-b", "other")
	if err := os.MkdirAll(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(foreign, "x.tar.gz")
	if err := os.WriteFile(secret, []byte("team-b's bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	// the store records the archives as found at its start (an earlier release's storage)
	store, err := artifactstore.New(&config.Options{StoragePath: f.root, StorageAddress: "127.0.0.1:0", StorageAdvAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, archiveFile(f.v1)))
	if err := os.Symlink(secret, filepath.Join(dir, archiveFile(f.v1))); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, archiveFile(f.v2)))
	b[len(b)/2] ^= 1
	os.WriteFile(filepath.Join(dir, archiveFile(f.v2)), b, 0o600)
	srv := f.server(t, Options{Store: store})
	for file, why := range map[string]string{archiveFile(f.v1): "not a regular file", archiveFile(f.v2): "damaged"} {
		code, _, body := get(t, srv, "/kclartifact/team-a/app/"+file)
		if code != http.StatusNotFound || !strings.Contains(body, why) || strings.Contains(body, "team-b's bytes") {
			t.Errorf("GET %s: %d, want 404 saying %q: %.200q", file, code, why, body)
		}
	}
}
