package fluxkcl

import (
	"bytes"
	"strings"
	"testing"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputchange"
)

// imageInputs are the inputs an ImagePolicy "web" gives at tag, with a Secret-sourced password.
func imageInputs(tag, digestChar, password string) []kclv1.InputValue {
	d := digest(digestChar)
	return []kclv1.InputValue{
		{Name: "db.password", Value: password, From: "Secret/db"},
		{Name: "replicas", Value: "2"},
		{Name: "web.digest", Value: d, From: "ImagePolicy/web"},
		{Name: "web.image", Value: "ghcr.io/acme/web:" + tag + "@" + d, From: "ImagePolicy/web"},
		{Name: "web.name", Value: "ghcr.io/acme/web", From: "ImagePolicy/web"},
		{Name: "web.tag", Value: tag, From: "ImagePolicy/web"},
	}
}

// The history says why each artifact was rendered: the inputs that changed since the entry
// below it, digests shortened, Secret values masked, an ImagePolicy's image left out for its
// tag and digest; an entry recorded before inputs were, and the oldest entry, claim no change.
func TestHistoryShowsInputChanges(t *testing.T) {
	onlyTag := imageInputs("1.4.3", "b", inputchange.Masked)
	onlyTag[2], onlyTag[3] = imageInputs("1.4.2", "a", "")[2], imageInputs("1.4.2", "a", "")[3] // same digest, new tag
	obj := historyOf(digest("4"),
		kclv1.ArtifactHistoryEntry{Digest: digest("4"), Inputs: onlyTag},
		kclv1.ArtifactHistoryEntry{Digest: digest("3"), Inputs: imageInputs("1.4.2", "a", inputchange.Masked)},
		kclv1.ArtifactHistoryEntry{Digest: digest("2"), Inputs: imageInputs("1.4.1", "9", inputchange.Masked)[1:]},
		kclv1.ArtifactHistoryEntry{Digest: digest("1")}, // rendered before inputs were recorded
		kclv1.ArtifactHistoryEntry{Digest: digest("0"), Inputs: imageInputs("1.0.0", "8", inputchange.Masked)},
	)
	var b bytes.Buffer
	if err := printTable(&b, []string{"Digest", "Inputs"}, lastColumn(t, obj)); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"DIGEST         \tINPUTS",
		"sha256:44444444\tweb.tag 1.4.2 → 1.4.3",
		"sha256:33333333\tdb.password = *** (new), web.digest sha256:99999999 → sha256:aaaaaaaa, web.tag 1.4.1 → 1.4.2",
		"sha256:22222222\t-",
		"sha256:11111111\t-",
		"sha256:00000000\t-",
	}
	if got := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("history:\n%s\nwant\n%s", b.String(), strings.Join(want, "\n"))
	}
}

// A Secret value that changes is named, never shown; a tenant's value cannot forge a row.
func TestHistoryInputChangesStayMaskedAndOneLine(t *testing.T) {
	from := []kclv1.InputValue{{Name: "db.password", Value: inputchange.Masked, From: "Secret/db"}, {Name: "note", Value: "a"}}
	to := []kclv1.InputValue{{Name: "db.password", Value: inputchange.Masked, From: "Secret/db"}, {Name: "note", Value: hostile}}
	obj := historyOf(digest("b"), kclv1.ArtifactHistoryEntry{Digest: digest("b"), Inputs: to}, kclv1.ArtifactHistoryEntry{Digest: digest("a"), Inputs: from})
	var b bytes.Buffer
	if err := printTable(&b, nil, lastColumn(t, obj)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 || strings.ContainsAny(b.String(), "\x1b\x07\u009b\u202e") || strings.Count(lines[0], "\t") != 1 {
		t.Fatalf("history of a hostile input:\n%q", b.String())
	}
	if want := `note a → \x1b[2J\x1b]0;t\x07\x1b]8;;http://evil\x07\u009b\u202e\nforged\trow`; !strings.HasSuffix(lines[0], "\t"+want) {
		t.Errorf("row %q, want it to end with %q", lines[0], want)
	}
	// the password did not change: only "changed" would name it, and never its value
	if strings.Contains(lines[0], "db.password") {
		t.Errorf("an unchanged Secret input is listed: %q", lines[0])
	}
}

// A row names at most three changes; the image of a policy is kept when its tag is not recorded
// beside it (an argument of that name from elsewhere), and when it is removed.
func TestHistoryInputChangesAreCounted(t *testing.T) {
	from := []kclv1.InputValue{{Name: "a", Value: "1"}, {Name: "b", Value: "1"}, {Name: "c", Value: "1"}, {Name: "d", Value: "1"},
		{Name: "api.image", Value: "x:1", From: "ConfigMap/api"}, {Name: "old.image", Value: "y:1", From: "ImagePolicy/old"}}
	to := []kclv1.InputValue{{Name: "a", Value: "2"}, {Name: "api.image", Value: "x:2", From: "ConfigMap/api"}}
	h := []kclv1.ArtifactHistoryEntry{{Inputs: to}, {Inputs: from}}
	if got, want := inputChanges(h, 0), "a 1 → 2, api.image x:1 → x:2, b removed, … (3 more)"; got != want {
		t.Errorf("changes %q, want %q", got, want)
	}
	h[0].Inputs, h[1].Inputs = h[1].Inputs[4:], h[0].Inputs[1:]
	if got, want := inputChanges(h, 0), "api.image x:2 → x:1, old.image = y:1 (new)"; got != want {
		t.Errorf("changes %q, want %q", got, want)
	}
	policy := []kclv1.InputValue{{Name: "web.image", Value: "w:1", From: "ImagePolicy/web"}, {Name: "web.tag", Value: "1", From: "ImagePolicy/web"}}
	h[0].Inputs, h[1].Inputs = []kclv1.InputValue{}, policy
	if got, want := inputChanges(h, 0), "web.image removed, web.tag removed"; got != want {
		t.Errorf("changes %q, want %q", got, want)
	}
}

// Without input changes the history keeps the columns it always had, State last: inputs recorded
// but equal, or not recorded at all, add no column.
func TestHistoryWithoutInputChangesHasNoInputsColumn(t *testing.T) {
	same := imageInputs("1.4.2", "a", inputchange.Masked)
	for name, obj := range map[string]*kclv1.KCLArtifact{
		"equal inputs": historyOf(digest("b"), kclv1.ArtifactHistoryEntry{Digest: digest("b"), Inputs: same}, kclv1.ArtifactHistoryEntry{Digest: digest("a"), Inputs: same}),
		"no inputs":    historyOf(digest("b"), kclv1.ArtifactHistoryEntry{Digest: digest("b")}, kclv1.ArtifactHistoryEntry{Digest: digest("a")}),
		"one entry":    historyOf(digest("b"), kclv1.ArtifactHistoryEntry{Digest: digest("b"), Inputs: same}),
	} {
		headers, rows := historyTable(obj)
		var b bytes.Buffer
		if err := printTable(&b, headers, rows); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		if !strings.HasSuffix(lines[0], "\tSTATE") || !strings.HasSuffix(lines[1], "\tcurrent") || len(rows[0]) != 6 {
			t.Errorf("%s: history\n%s\nwant six columns, State last", name, b.String())
		}
	}
}

// lastColumn keeps the digest and the inputs of obj's history rows.
func lastColumn(t *testing.T, obj *kclv1.KCLArtifact) [][]string {
	t.Helper()
	headers, rows := historyTable(obj)
	if headers[len(headers)-1] != "Inputs" {
		t.Fatalf("history headers %q: no Inputs column last", headers)
	}
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = []string{truncateHex(r[0]), r[len(r)-1]}
	}
	return out
}
