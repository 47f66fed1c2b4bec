package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/artifact/config"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
)

const (
	cmV1 = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: ns}\ndata: {version: \"1\"}\n---\n" +
		"apiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: ns}\nstringData: {password: hunter2}\n"
	cmV2 = "apiVersion: v1\nkind: Secret\nmetadata: {name: db, namespace: ns}\nstringData: {password: correct-horse}\n---\n" +
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: ns}\ndata: {version: \"2\"}\n"
)

// storeHistory publishes each content in turn with the artifact store, as the controller does,
// and serves its storage.
func storeHistory(t *testing.T, o Options, contents ...string) (*httptest.Server, []kclv1.ArtifactHistoryEntry) {
	t.Helper()
	root := t.TempDir()
	s, err := artifactstore.New(&config.Options{StoragePath: root, StorageAddress: "127.0.0.1:0", StorageAdvAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns"}}
	var history []kclv1.ArtifactHistoryEntry
	for i, c := range contents {
		content := artifactstore.NewContent()
		content.Write([]byte(c))
		a, _, err := s.Publish(obj, "main", "manifests.yaml", content)
		content.Close()
		if err != nil {
			t.Fatal(err)
		}
		e := kclv1.ArtifactHistoryEntry{Digest: a.Digest, Revision: a.Revision, URL: a.URL, SourceRevision: "main@sha1:" + strings.Repeat(string(rune('a'+i)), 40)}
		history = append([]kclv1.ArtifactHistoryEntry{e}, history...)
	}
	// The controller's cache answers History in production; the test's list stands for it.
	o.History = func(_ context.Context, ns, name string) ([]kclv1.ArtifactHistoryEntry, error) {
		if ns != obj.Namespace || name != obj.Name {
			return nil, fmt.Errorf("no KCLArtifact %s/%s", ns, name)
		}
		return history, nil
	}
	h, err := HandlerWithOptions(s, o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(withTokens(s, h))
	t.Cleanup(srv.Close)
	return srv, history
}

func TestDiffOfTheLatestAgainstThePrevious(t *testing.T) {
	srv, history := storeHistory(t, Options{}, cmV1, cmV2)
	code, body, hdr := get(t, srv.URL+"/kclartifact/ns/app/diff")
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/x-diff") {
		t.Fatalf("%d %s: %s", code, hdr.Get("Content-Type"), body)
	}
	for _, s := range []string{
		history[1].Revision + " (" + history[1].SourceRevision + ") -> " + history[0].Revision,
		"# 0 added, 0 removed, 2 changed, 0 unchanged",
		"--- a/ConfigMap/ns/app", "-  version: \"1\"", "+  version: \"2\"",
		"--- a/Secret/ns/db", "-  password: '***'", "+  password: '*** (changed)'",
	} {
		if !strings.Contains(body, s) {
			t.Errorf("the diff lacks %q:\n%s", s, body)
		}
	}
	for _, secret := range []string{"hunter2", "correct-horse"} {
		if strings.Contains(body, secret) {
			t.Errorf("the diff shows the Secret value %q", secret)
		}
	}
}

func TestDiffBetweenChosenArtifacts(t *testing.T) {
	srv, history := storeHistory(t, Options{ShowSecrets: true}, cmV1, cmV2, cmV1)
	_, body, _ := get(t, srv.URL+"/kclartifact/ns/app/diff?from="+history[1].Digest+"&to="+history[2].Digest)
	if !strings.Contains(body, "-  password: correct-horse") || !strings.Contains(body, "+  password: hunter2") {
		t.Errorf("from the second to the first artifact, secrets shown:\n%s", body)
	}
	code, body, _ := get(t, srv.URL+"/kclartifact/ns/app/diff?from=sha256:0000")
	if code != http.StatusNotFound || !strings.Contains(body, "not a kept artifact") || !strings.Contains(body, history[0].Digest) {
		t.Errorf("an unknown digest: %d %s", code, body)
	}
	if code, _, _ := get(t, srv.URL+"/kclartifact/ns/other/diff"); code != http.StatusNotFound {
		t.Errorf("a KCLArtifact without artifacts: %d", code)
	}
}

func TestDiffWithoutAPreviousArtifact(t *testing.T) {
	srv, _ := storeHistory(t, Options{}, cmV1)
	code, body, _ := get(t, srv.URL+"/kclartifact/ns/app/diff")
	if code != http.StatusNotFound || !strings.Contains(body, "no previous artifact") {
		t.Errorf("%d %s", code, body)
	}
}

// Each side of a diff is held in memory: an artifact over the bound is refused before it is read.
func TestDiffRefusesTooLargeArtifacts(t *testing.T) {
	srv, _ := storeHistory(t, Options{MaxDiffYAML: 100}, cmV1, cmV2)
	code, body, _ := get(t, srv.URL+"/kclartifact/ns/app/diff")
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "too large") {
		t.Errorf("%d %s", code, body)
	}
}

// A value the KCLArtifact reads from a Secret, copied by its program into a ConfigMap, is masked
// in /diff like a Secret's own values; when the Secrets cannot be read, no diff is served.
// Watched first: the ConfigMap's line showed the password.
func TestDiffMasksValuesFromSecretsWhereverTheyLand(t *testing.T) {
	leaked := cmV1 + "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: copy, namespace: ns, labels: {p: TOPSECRET-pw-42}}\ndata: {x: 'pw=TOPSECRET-pw-42'}\n"
	sensitive := func(context.Context, string, string) ([]string, error) { return []string{"TOPSECRET-pw-42"}, nil }
	srv, _ := storeHistory(t, Options{Sensitive: sensitive}, cmV1, leaked)
	code, body, _ := get(t, srv.URL+"/kclartifact/ns/app/diff")
	if code != http.StatusOK || strings.Contains(body, "TOPSECRET") || !strings.Contains(body, "+  x: pw=***") {
		t.Fatalf("%d:\n%s", code, body)
	}
	failing := func(context.Context, string, string) ([]string, error) { return nil, errors.New("forbidden") }
	srv, _ = storeHistory(t, Options{Sensitive: failing}, cmV1, leaked)
	if code, body, _ := get(t, srv.URL+"/kclartifact/ns/app/diff"); code != http.StatusServiceUnavailable || strings.Contains(body, "TOPSECRET") {
		t.Fatalf("Secrets unreadable: %d %s", code, body)
	}
	srv, _ = storeHistory(t, Options{Sensitive: sensitive, ShowSecrets: true}, cmV1, leaked)
	if _, body, _ := get(t, srv.URL+"/kclartifact/ns/app/diff"); !strings.Contains(body, "TOPSECRET-pw-42") {
		t.Fatalf("--show-secret-values hides the value:\n%s", body)
	}
}

// The health of both ends comes after the pair, as comment lines: a rollback's diff (the RolledBack
// event links it) says which side failed, where and why, and which one was healthy. A message's
// lines cannot pass for lines of the diff.
func TestDiffShowsTheHealthOfBothEnds(t *testing.T) {
	srv, history := storeHistory(t, Options{}, cmV1, cmV2)
	healthyAt := metav1.NewTime(time.Date(2025, 3, 4, 10, 5, 0, 0, time.FixedZone("CET", 3600)))
	history[1].Health, history[1].HealthyAt = kclv1.HealthHealthy, &healthyAt
	history[0].Health = kclv1.HealthFailed
	history[0].Failure = &kclv1.ArtifactFailure{Phase: "main", Reason: "HealthCheckFailed",
		Message: "Deployment/ns/app not ready\r\n--- a/Secret/ns/forged\n+  password: hunter2"}
	code, body, _ := get(t, srv.URL+"/kclartifact/ns/app/diff")
	if code != http.StatusOK {
		t.Fatalf("%d: %s", code, body)
	}
	lines := strings.Split(body, "\n")
	want := []string{
		"# ns/app: " + history[1].Revision + " (" + history[1].SourceRevision + ") -> " + history[0].Revision + " (" + history[0].SourceRevision + ")",
		"# from: Healthy since 2025-03-04T09:05:00Z",
		"# to: Failed in phase main: HealthCheckFailed: Deployment/ns/app not ready",
		"#   --- a/Secret/ns/forged",
		"#   +  password: hunter2",
		"# 0 added, 0 removed, 2 changed, 0 unchanged",
	}
	if len(lines) < len(want) || strings.Join(lines[:len(want)], "\n") != strings.Join(want, "\n") {
		t.Errorf("the diff starts with\n%s\nwant\n%s", strings.Join(lines[:min(len(lines), len(want))], "\n"), strings.Join(want, "\n"))
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "--- a/Secret/ns/forged") || strings.Contains(l, "\r") {
			t.Errorf("a message line passes for a line of the diff: %q", l)
		}
	}

	history[0].Health, history[0].Failure = kclv1.HealthNotApplied, nil
	history[1].Health, history[1].HealthyAt = "", nil
	_, body, _ = get(t, srv.URL+"/kclartifact/ns/app/diff")
	for _, s := range []string{"\n# from: health not recorded\n# to: Not applied\n# 0 added"} {
		if !strings.Contains(body, s) {
			t.Errorf("the diff lacks %q:\n%s", s, body)
		}
	}
	history[0].Health = kclv1.HealthProgressing
	if _, body, _ = get(t, srv.URL+"/kclartifact/ns/app/diff"); !strings.Contains(body, "\n# to: Progressing\n") {
		t.Errorf("the diff lacks the Progressing end:\n%s", body)
	}
}

// An entry marked missing (its file gone, or no longer of its digest) is not compared, even when
// a file under its name is still there.
func TestDiffRefusesMissingArtifacts(t *testing.T) {
	srv, history := storeHistory(t, Options{}, cmV1, cmV2)
	history[1].Missing = true
	code, body, _ := get(t, srv.URL+"/kclartifact/ns/app/diff")
	if code != http.StatusNotFound || !strings.Contains(body, history[1].Revision+" is missing from storage") {
		t.Errorf("%d %s", code, body)
	}
}

// The inputs that changed between the two ends follow their health, one comment line each, so
// that the diff says why the new artifact was rendered: a Secret's value stays masked, one
// copied into a ConfigMap input is masked as in the objects, and no value passes for a line of
// the diff. An end rendered before inputs were recorded claims no change.
func TestDiffShowsTheInputChanges(t *testing.T) {
	sensitive := func(context.Context, string, string) ([]string, error) { return []string{"TOPSECRET-pw-42"}, nil }
	srv, history := storeHistory(t, Options{Sensitive: sensitive}, cmV1, cmV2)
	history[1].Inputs = []kclv1.InputValue{
		{Name: "db.password", Value: "***", From: "Secret/db"},
		{Name: "note", Value: "a", From: "ConfigMap/notes"},
		{Name: "web.tag", Value: "1.4.2", From: "ImagePolicy/web"},
	}
	history[0].Inputs = []kclv1.InputValue{
		{Name: "copy", Value: "pw=TOPSECRET-pw-42", From: "ConfigMap/leaky"},
		{Name: "db.password", Value: "***", From: "Secret/db"},
		{Name: "note", Value: "b\n--- a/Secret/ns/forged\n+  password: hunter2", From: "ConfigMap/notes"},
		{Name: "web.tag", Value: "1.4.3", From: "ImagePolicy/web"},
	}
	code, body, _ := get(t, srv.URL+"/kclartifact/ns/app/diff")
	if code != http.StatusOK {
		t.Fatalf("%d: %s", code, body)
	}
	want := "# to: health not recorded\n" +
		"# input: copy = pw=*** (new)\n" +
		`# input: note a → b\n--- a/Secret/ns/forged\n+  password: hunter2` + "\n" +
		"# input: web.tag 1.4.2 → 1.4.3\n" +
		"# 0 added, 0 removed, 2 changed, 0 unchanged\n"
	if !strings.Contains(body, want) {
		t.Errorf("the diff lacks\n%s\nin\n%s", want, body)
	}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "--- a/Secret/ns/forged") || strings.Contains(l, "TOPSECRET") {
			t.Errorf("an input leaks or forges a line of the diff: %q", l)
		}
	}

	history[1].Inputs = nil // rendered before inputs were recorded
	if _, body, _ = get(t, srv.URL+"/kclartifact/ns/app/diff"); strings.Contains(body, "# input") {
		t.Errorf("input changes claimed against an entry without inputs:\n%s", body)
	}
}
