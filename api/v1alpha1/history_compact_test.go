package v1alpha1

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
)

func TestHistoryIsStoredWithoutWhatTheDigestGives(t *testing.T) {
	const dir = "http://kcl.example:9090/kclartifact/apps/web/"
	const token = "?token=0123abcd"
	file := func(c string) string { return strings.Repeat(c, 64) + ".tar.gz" }
	status := KCLArtifactStatus{
		Artifact: &meta.Artifact{Digest: "sha256:aa", URL: dir + file("a") + token, Revision: "main@sha256:aa"},
		History: []ArtifactHistoryEntry{
			{Digest: "sha256:aa", Revision: "main@sha256:aa", SourceRevision: "main@sha1:1", URL: dir + file("a") + token},
			{Digest: "sha256:bb", Revision: "latest@sha256:bb", SourceRevision: "sha256:feed", URL: dir + file("b") + token},
			// not what the digest and source revision give: a ref renamed, another address,
			// another token, another directory
			{Digest: "sha256:cc", Revision: "v1@sha256:cc", SourceRevision: "main@sha1:2", URL: "http://other:9090/kclartifact/apps/web/" + file("c") + token},
			{Digest: "sha256:dd", Revision: "main@sha256:dd", SourceRevision: "main@sha1:3", URL: dir + file("d") + "?token=old"},
			{Digest: "sha256:ee", Revision: "main@sha256:ee", SourceRevision: "main@sha1:4", URL: "http://kcl.example:9090/kclartifact/apps/api/" + file("e") + token},
		},
	}
	data, err := json.Marshal(status)
	if err != nil {
		t.Fatal(err)
	}
	var stored struct {
		History []map[string]any `json:"history"`
	}
	if err := json.Unmarshal(data, &stored); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"url": file("a")},
		{"url": file("b")},
		{"revision": "v1@sha256:cc", "url": "http://other:9090/kclartifact/apps/web/" + file("c") + token},
		{"url": dir + file("d") + "?token=old"},
		{"url": "http://kcl.example:9090/kclartifact/apps/api/" + file("e") + token},
	}
	for i, w := range want {
		got := stored.History[i]
		if got["revision"] != w["revision"] || got["url"] != w["url"] {
			t.Errorf("entry %d stored as revision %v, url %v; want %v, %v", i, got["revision"], got["url"], w["revision"], w["url"])
		}
	}
	var back KCLArtifactStatus
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, status) {
		t.Fatalf("read back\n%+v\nwant\n%+v", back.History, status.History)
	}

	// without a current artifact nothing is relative
	status.Artifact = nil
	data, _ = json.Marshal(status)
	back = KCLArtifactStatus{}
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, status) {
		t.Fatalf("without an artifact, read back\n%+v\nwant\n%+v", back.History, status.History)
	}
	// the whole object too: the token only in the current artifact and the two URLs elsewhere
	obj := KCLArtifact{Status: status}
	obj.Status.Artifact = &meta.Artifact{URL: dir + file("a") + token}
	data, _ = json.Marshal(&obj)
	if strings.Count(string(data), token) != 3 {
		t.Fatalf("the object is not stored in the short form: %s", data)
	}
	var objBack KCLArtifact
	if err := json.Unmarshal(data, &objBack); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(objBack.Status, obj.Status) {
		t.Fatalf("object read back\n%+v\nwant\n%+v", objBack.Status.History, obj.Status.History)
	}
}

// A client's Get into an object it read before decodes into it: nothing of the entries it held
// stays, a revision the JSON leaves out least of all.
func TestHistoryDecodedIntoAReadObject(t *testing.T) {
	const dir = "http://kcl.example/kclartifact/apps/web/"
	file := func(c string) string { return strings.Repeat(c, 64) + ".tar.gz" }
	older := KCLArtifactStatus{
		Artifact: &meta.Artifact{URL: dir + file("a"), Metadata: map[string]string{"stale": "x"}},
		History: []ArtifactHistoryEntry{
			{Digest: "sha256:aa", Revision: "v1@sha256:aa", SourceRevision: "main@sha1:1", URL: dir + file("a"), Health: HealthHealthy},
		},
	}
	newer := KCLArtifactStatus{
		Artifact: &meta.Artifact{URL: dir + file("b")},
		History: []ArtifactHistoryEntry{
			{Digest: "sha256:bb", Revision: "main@sha256:bb", SourceRevision: "main@sha1:2", URL: dir + file("b")},
			{Digest: "sha256:aa", Revision: "v1@sha256:aa", SourceRevision: "main@sha1:1", URL: dir + file("a"), Health: HealthHealthy},
		},
	}
	data, err := json.Marshal(newer)
	if err != nil {
		t.Fatal(err)
	}
	into := *older.DeepCopy()
	into.History = append(make([]ArtifactHistoryEntry, 0, 4), into.History...) // room to reuse
	if err := json.Unmarshal(data, &into); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(into, newer) {
		t.Fatalf("decoded into a read status\n%+v\nwant\n%+v", into, newer)
	}
}

func TestRevisionRef(t *testing.T) {
	for in, want := range map[string]string{
		"main@sha1:abc": "main", "v1.2.3@sha256:abc": "v1.2.3", "refs/heads/x@sha1:1": "refs/heads/x",
		"sha256:abc": "latest", "@sha1:abc": "latest", "": "latest",
	} {
		if got := RevisionRef(in); got != want {
			t.Errorf("RevisionRef(%q) = %q, want %q", in, got, want)
		}
	}
}
