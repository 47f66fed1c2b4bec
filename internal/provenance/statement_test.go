package provenance

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

const manifest = "sha256:e062231efb0ba7a693386c78f9dd2b62ee98d1b238e1650aefda5486bbdd4345"

func build() Build {
	return Build{
		Repository: "registry.example.com/fleet/app", Manifest: manifest,
		SourceKind: "GitRepository", SourceURL: "https://git.example.com/app.git",
		SourceRevision: "main@sha1:0123456789abcdef0123456789abcdef01234567",
		SourceDigest:   "sha256:" + strings.Repeat("ab", 32),
		Path:           "./deploy",
		Arguments:      map[string]string{"env": "prod", "token": "***"},
		Inputs:         []Input{{Name: "token", From: "Secret/app"}, {Name: "env", From: "ConfigMap/cfg"}},
		Dependencies: []Dependency{{Name: "k8s", Version: "1.31.2", Source: "oci://ghcr.io/kcl-lang/k8s:1.31.2",
			Digest: "sha256:" + strings.Repeat("cd", 32), Sum: "bm90IGEgcmVhbCBzdW0="}},
		Engine: "v0.11.2", Controller: "https://github.com/kcl-flux/kcl-artifact-controller", ControllerVersion: "v0.9.0",
		InvocationID: "flux-system/app/42",
		StartedOn:    time.Date(2026, 11, 29, 1, 2, 3, 0, time.UTC), FinishedOn: time.Date(2026, 11, 29, 1, 2, 9, 0, time.UTC),
	}
}

// decoded is Statement(b) read back as generic JSON.
func decoded(t *testing.T, b Build) map[string]any {
	t.Helper()
	out, err := Statement(b)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// at walks m by keys and indexes.
func at(t *testing.T, m any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			obj, ok := m.(map[string]any)
			if !ok {
				t.Fatalf("at %v: %v is not an object", path, m)
			}
			m = obj[k]
		case int:
			arr, ok := m.([]any)
			if !ok || k >= len(arr) {
				t.Fatalf("at %v: %v has no index %d", path, m, k)
			}
			m = arr[k]
		}
	}
	return m
}

func TestStatementInTotoAndSLSAFields(t *testing.T) {
	m := decoded(t, build())
	for _, c := range []struct {
		path []any
		want any
	}{
		{[]any{"_type"}, "https://in-toto.io/Statement/v1"},
		{[]any{"predicateType"}, "https://slsa.dev/provenance/v1"},
		{[]any{"predicate", "buildDefinition", "buildType"}, BuildType},
		{[]any{"predicate", "buildDefinition", "externalParameters", "source", "url"}, "https://git.example.com/app.git"},
		{[]any{"predicate", "buildDefinition", "externalParameters", "path"}, "./deploy"},
		{[]any{"predicate", "buildDefinition", "externalParameters", "inputs", 0, "from"}, "Secret/app"},
		{[]any{"predicate", "buildDefinition", "resolvedDependencies", 0, "digest", "gitCommit"}, "0123456789abcdef0123456789abcdef01234567"},
		{[]any{"predicate", "buildDefinition", "resolvedDependencies", 0, "digest", "sha256"}, strings.Repeat("ab", 32)},
		{[]any{"predicate", "buildDefinition", "resolvedDependencies", 1, "uri"}, "oci://ghcr.io/kcl-lang/k8s:1.31.2"},
		{[]any{"predicate", "buildDefinition", "resolvedDependencies", 1, "digest", "sha256"}, strings.Repeat("cd", 32)},
		{[]any{"predicate", "buildDefinition", "resolvedDependencies", 1, "annotations", "sum"}, "bm90IGEgcmVhbCBzdW0="},
		{[]any{"predicate", "runDetails", "builder", "id"}, "https://github.com/kcl-flux/kcl-artifact-controller"},
		{[]any{"predicate", "runDetails", "builder", "version", "kcl"}, "v0.11.2"},
		{[]any{"predicate", "runDetails", "metadata", "invocationId"}, "flux-system/app/42"},
		{[]any{"predicate", "runDetails", "metadata", "startedOn"}, "2026-11-29T01:02:03Z"},
	} {
		if got := at(t, m, c.path...); got != c.want {
			t.Errorf("%v = %v, want %v", c.path, got, c.want)
		}
	}
}

func TestStatementSubjectCarriesManifestDigest(t *testing.T) {
	m := decoded(t, build())
	subjects := at(t, m, "subject").([]any)
	if len(subjects) != 1 {
		t.Fatalf("subjects %v, want one", subjects)
	}
	if got := at(t, subjects[0], "name"); got != "registry.example.com/fleet/app" {
		t.Errorf("subject name %v", got)
	}
	if got := at(t, subjects[0], "digest", "sha256"); got != strings.TrimPrefix(manifest, "sha256:") {
		t.Errorf("subject digest %v", got)
	}
}

// The caller masks Secret values; Statement must write the arguments as given, adding nothing.
func TestStatementKeepsMaskedArgumentsAsGiven(t *testing.T) {
	m := decoded(t, build())
	args := at(t, m, "predicate", "buildDefinition", "externalParameters", "arguments").(map[string]any)
	if len(args) != 2 || args["token"] != "***" || args["env"] != "prod" {
		t.Errorf("arguments %v, want exactly env=prod token=***", args)
	}
}

func TestStatementIsReproducible(t *testing.T) {
	a, err := Statement(build())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Statement(build())
	if !bytes.Equal(a, b) {
		t.Errorf("two statements of one build differ:\n%s\n%s", a, b)
	}
	other := build()
	other.Manifest = "sha256:" + strings.Repeat("0", 64)
	c, _ := Statement(other)
	if bytes.Equal(a, c) {
		t.Error("another manifest gives the same statement")
	}
}

// An OCIRepository revision's "@sha256:" is a manifest digest, not a commit.
func TestStatementGitCommitOnlyForGitSources(t *testing.T) {
	b := build()
	b.SourceKind, b.SourceRevision = "OCIRepository", "latest@sha256:"+strings.Repeat("ef", 32)
	m := decoded(t, b)
	digest := at(t, m, "predicate", "buildDefinition", "resolvedDependencies", 0, "digest").(map[string]any)
	if _, ok := digest["gitCommit"]; ok || digest["sha256"] != strings.Repeat("ab", 32) {
		t.Errorf("source digest %v, want the artifact sha256 only", digest)
	}
}

func TestStatementRefusesIncompleteBuilds(t *testing.T) {
	for name, edit := range map[string]func(*Build){
		"no repository":       func(b *Build) { b.Repository = "" },
		"no builder":          func(b *Build) { b.Controller = "" },
		"manifest not hex":    func(b *Build) { b.Manifest = "sha256:xyz" },
		"manifest not sha256": func(b *Build) { b.Manifest = "sha512:" + strings.Repeat("a", 128) },
	} {
		b := build()
		edit(&b)
		if _, err := Statement(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// Read gives back what Statement recorded.
func TestReadIsStatementBackwards(t *testing.T) {
	b := Build{Repository: "127.0.0.1:5000/fleet/app", Manifest: "sha256:" + strings.Repeat("ab", 32),
		SourceKind: "GitRepository", SourceURL: "https://git.example/app.git",
		SourceRevision: "main@sha1:0123456789abcdef0123456789abcdef01234567", SourceDigest: "sha256:" + strings.Repeat("cd", 32),
		Path: "app", Arguments: map[string]string{"env": "prod", "token": "***"},
		Inputs: []Input{{Name: "token", From: "Secret/db"}}, Engine: "v0.11.2",
		Dependencies: []Dependency{{Name: "k8s", Version: "1.31.2", Source: "oci://ghcr.io/kcl-lang/k8s:1.31.2",
			Digest: "sha256:" + strings.Repeat("ef", 32), Sum: "abc="}},
		DependenciesRecorded: true,
		Controller:           "https://github.com/kcl-flux/kcl-artifact-controller", ControllerVersion: "v1.2.3",
		InvocationID: "uid/sha256:x", FinishedOn: time.Date(2026, 11, 29, 1, 2, 3, 0, time.UTC)}
	st, err := Statement(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Read(st)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, b) {
		t.Fatalf("read back\n%+v\nwant\n%+v", got, b)
	}
	if _, err := Read([]byte(`{"_type":"https://in-toto.io/Statement/v1","predicateType":"https://example/other"}`)); err == nil {
		t.Fatal("a statement of another predicate type was read")
	}
}
