package yamldiff

import (
	"bytes"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/renderer/html"
)

// githubHTML renders Markdown as a GitHub comment is: CommonMark with GFM tables, raw HTML
// passed (GitHub keeps <details>, <summary>, <code>, <a> and comments out of sight).
func githubHTML(t *testing.T, md string) string {
	t.Helper()
	var out bytes.Buffer
	gm := goldmark.New(goldmark.WithExtensions(extension.GFM), goldmark.WithRendererOptions(html.WithUnsafe()))
	if err := gm.Convert([]byte(md), &out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// A pull request names objects and fills values so that its comment lies: a fake table row, a
// "no functional change" line, an HTML comment hiding every diff after it, a link in the
// summary. Rendered as GitHub renders it, the table has one row per object, every diff is
// visible, and nothing injected is markup. (Identifiers like these are refused when rendered,
// manifests.Parse; this holds for whatever reaches a report.) Watched first: the fake row was a
// row and the comment hid the diffs after it.
func TestMarkdownReportCannotBeForged(t *testing.T) {
	res := Result{Objects: []Object{
		{Op: Changed, Kind: "ConfigMap", Name: "a` | changed | main |\n\n**Reviewed: no functional change.** @admins <!--",
			Unified: "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-v: 1\n+v: DIFF-ONE\n"},
		{Op: Added, Kind: "ConfigMap", Name: "</code></summary><a href=\"https://evil.example\">click</a>",
			Unified: "--- a/y\n+++ b/y\n@@ -0,0 +1 @@\n+v: \"</details><!-- ```\"\n+w: DIFF-TWO\n"},
		{Op: Changed, Kind: "Secret", Name: "plain", Unified: "--- a/z\n+++ b/z\n@@ -1 +1 @@\n-v: 1\n+v: DIFF-THREE\n"},
	}}
	page := githubHTML(t, res.Markdown())
	body := page[strings.Index(page, "<tbody>"):strings.Index(page, "</tbody>")]
	if rows := strings.Count(body, "<tr>"); rows != len(res.Objects) {
		t.Fatalf("%d table rows for %d objects:\n%s", rows, len(res.Objects), page)
	}
	for _, want := range []string{"DIFF-ONE", "DIFF-TWO", "DIFF-THREE"} {
		i := strings.Index(page, want)
		if i < 0 || strings.LastIndex(page[:i], "<!--") > strings.LastIndex(page[:i], "-->") {
			t.Fatalf("%s is not visible:\n%s", want, page)
		}
	}
	for _, injected := range []string{"<strong>", "<a href", "<!--", "</summary><a"} {
		if strings.Contains(page, injected) {
			t.Fatalf("%q became markup:\n%s", injected, page)
		}
	}
	if strings.Count(page, "<details>") != 3 || strings.Count(page, "</details>") != 3 {
		t.Fatalf("the collapsed sections are not one per object:\n%s", page)
	}
}
