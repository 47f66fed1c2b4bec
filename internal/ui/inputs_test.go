package ui

import (
	"context"
	"net/http"
	"strings"
	"testing"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// The compared pair says why the newer artifact was rendered: the inputs that changed between
// them, a Secret's value masked (as recorded) and a value holding one masked as in the objects,
// every value escaped. An end without recorded inputs claims no change.
func TestArtifactPageShowsTheInputChangesOfTheDiff(t *testing.T) {
	f := newFixture(t)
	h := f.app.Status.History
	h[1].Inputs = []kclv1.InputValue{
		{Name: "db.password", Value: "***", From: "Secret/db"},
		{Name: "note", Value: "a", From: "ConfigMap/notes"},
		{Name: "web.tag", Value: "1.4.2", From: "ImagePolicy/web"},
	}
	h[0].Inputs = []kclv1.InputValue{
		{Name: "copy", Value: "pw=" + secretV2, From: "ConfigMap/leaky"},
		{Name: "db.password", Value: "***", From: "Secret/db"},
		{Name: "note", Value: evil, From: "ConfigMap/notes"},
		{Name: "web.tag", Value: "1.4.3", From: "ImagePolicy/web"},
	}
	sensitive := func(context.Context, string, string) ([]string, error) { return []string{secretV2}, nil }
	code, _, page := get(t, f.server(t, Options{Sensitive: sensitive}), "/kclartifact/team-a/app/")
	if code != http.StatusOK {
		t.Fatalf("GET: %d\n%s", code, page)
	}
	inputs := between(t, page, `id="diff-inputs"`, `</div>`)
	var items []string
	for _, li := range strings.Split(inputs, "<li>")[1:] {
		items = append(items, text(li))
	}
	want := []string{"copy = pw=*** (new)", "note a → " + evil, "web.tag 1.4.2 → 1.4.3"}
	if strings.Join(items, "\n") != strings.Join(want, "\n") {
		t.Errorf("inputs changed:\n%s\nwant\n%s", strings.Join(items, "\n"), strings.Join(want, "\n"))
	}
	expectNotContains(t, "the page", page, secretV2)
	expectEscaped(t, "the inputs changed", page)

	h[1].Inputs = nil
	if _, _, page = get(t, f.server(t, Options{Sensitive: sensitive}), "/kclartifact/team-a/app/"); strings.Contains(page, `id="diff-inputs"`) {
		t.Errorf("input changes claimed against an entry without inputs:\n%s", between(t, page, `id="diff-inputs"`, `</div>`))
	}
}

// The status shows what the published artifact exports, escaped.
func TestArtifactPageShowsTheExports(t *testing.T) {
	f := newFixture(t)
	f.app.Status.Exports = []kclv1.ExportedValue{
		{Name: "service", Value: "web-svc", Literal: `"web-svc"`},
		{Name: "note", Value: evil, Literal: `"x"`},
	}
	_, _, page := get(t, f.server(t, Options{}), "/kclartifact/team-a/app/")
	exports := text(between(t, page, `id="exports"`, `</dd>`))
	expectContains(t, "the exports", exports, "serviceweb-svc", "note"+evil)
	expectEscaped(t, "the exports", page)
	f.app.Status.Exports = nil
	if _, _, page = get(t, f.server(t, Options{}), "/kclartifact/team-a/app/"); strings.Contains(page, `id="exports"`) {
		t.Error("an Exports row without exports")
	}
}
