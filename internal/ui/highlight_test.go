package ui

import (
	"html"
	"regexp"
	"strings"
	"testing"
)

func TestHighlightYAML(t *testing.T) {
	src := `# a comment
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web # trailing comment
  labels:
    "app.kubernetes.io/name": web
data:
  replicas: 3
  ratio: -1.5e3
  enabled: true
  nothing: null
  image: nginx:1.27
  url: http://example.com/#anchor
  quoted: "a \" b: c"
  single: 'it''s'
  empty: {}
  list: []
  script: <script>alert(1)</script>
  block: |
    line one: not a key
      <b>indented</b>

    after a blank line
  next: value
items:
- name: a
  value: 1
- - nested
- |-
  block in a list
- "x" # after a quote
`
	got := string(highlightYAML([]byte(src)))
	if plain := html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(got, "")); plain != src {
		t.Fatalf("the highlighted YAML does not read as the source:\n%s", plain)
	}
	for _, want := range []string{
		`<span class="c"># a comment</span>`,
		`<span class="d">---</span>`,
		`<span class="k">apiVersion</span><span class="p">:</span> <span class="s">v1</span>`,
		`<span class="s">web</span> <span class="c"># trailing comment</span>`,
		`<span class="k">&#34;app.kubernetes.io/name&#34;</span>`,
		`<span class="n">3</span>`, `<span class="n">-1.5e3</span>`,
		`<span class="b">true</span>`, `<span class="b">null</span>`,
		`<span class="s">nginx:1.27</span>`,
		`<span class="s">http://example.com/#anchor</span>`,
		`<span class="s">&#34;a \&#34; b: c&#34;</span>`,
		`<span class="s">&#39;it&#39;&#39;s&#39;</span>`,
		`<span class="p">{}</span>`, `<span class="p">[]</span>`,
		`<span class="s">&lt;script&gt;alert(1)&lt;/script&gt;</span>`,
		`<span class="p">|</span>`,
		`<span class="s">    line one: not a key</span>`,
		`<span class="s">      &lt;b&gt;indented&lt;/b&gt;</span>`,
		`<span class="s">    after a blank line</span>`,
		`  <span class="k">next</span><span class="p">:</span> <span class="s">value</span>`,
		`<span class="p">-</span> <span class="k">name</span>`,
		`<span class="p">-</span> <span class="p">-</span> <span class="s">nested</span>`,
		`<span class="p">|-</span>`, `<span class="s">  block in a list</span>`,
		`<span class="s">&#34;x&#34;</span> <span class="c"># after a quote</span>`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %s in\n%s", want, got)
		}
	}
	if strings.Contains(got, "<script") || strings.Contains(got, "<b>") {
		t.Errorf("markup of the YAML went through:\n%s", got)
	}
}

func TestDiffLines(t *testing.T) {
	unified := "--- a/ConfigMap/ns/x\n+++ b/ConfigMap/ns/x\n@@ -1,3 +1,3 @@\n data:\n-  v: \"1\"\n+  v: \"2\"\n--- not a header\n"
	want := []diffLine{
		{"hunk", "@@ -1,3 +1,3 @@"}, {"ctx", " data:"}, {"del", `-  v: "1"`}, {"add", `+  v: "2"`},
		{"del", "--- not a header"},
	}
	got := diffLines(unified)
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %v, want %v", i, got[i], want[i])
		}
	}
}
