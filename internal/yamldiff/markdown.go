package yamldiff

import (
	"fmt"
	"html"
	"strings"
)

// MarkdownLimit is the size a Markdown report keeps under: a GitHub comment holds 65,536
// characters, and a workflow may add its own lines.
const MarkdownLimit = 60000

// Markdown is the comparison as a pull-request comment: the counts, a table of the objects that
// differ, and each object's diff in a collapsed section. Diffs that would take it past
// MarkdownLimit are left out, and say so; the table stays whole.
func (r Result) Markdown() string {
	var b strings.Builder
	if len(r.Objects) == 0 {
		fmt.Fprintf(&b, "### KCL render diff: no changes\n\n%d objects unchanged.\n", r.Unchanged)
		return b.String()
	}
	fmt.Fprintf(&b, "### KCL render diff: %s\n\n", r.Summary())
	b.WriteString("| Object | Change | Phase |\n|---|---|---|\n")
	for _, o := range r.Objects {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", codeSpan(o.ID()), o.Op, o.Phase)
	}
	left := 0
	for _, o := range r.Objects {
		section := details(o)
		if b.Len()+len(section) > MarkdownLimit {
			left++
			continue
		}
		b.WriteString(section)
	}
	if left > 0 {
		fmt.Fprintf(&b, "\n%d diffs left out to keep this under %d characters: run `render --diff-from` locally to see them.\n",
			left, MarkdownLimit)
	}
	return b.String()
}

// details is one object's diff as a collapsed section, in a fence longer than any backtick run
// of the diff, so that YAML holding Markdown cannot end it.
func details(o Object) string {
	fence := "```"
	for strings.Contains(o.Unified, fence) {
		fence += "`"
	}
	return fmt.Sprintf("\n<details><summary><code>%s</code> %s</summary>\n\n%sdiff\n%s%s\n\n</details>\n",
		html.EscapeString(oneLine(o.ID())), o.Op, fence, o.Unified, fence)
}

// codeSpan is s as inline code in a table cell: in a code span nothing is markup, a mention or
// a link; its fence is longer than any backtick run of s, a '|' is escaped (GFM splits cells on
// it before anything else) and a line break becomes a space. Identifiers are checked when
// rendered (manifests.Parse); this holds whatever reaches a report.
func codeSpan(s string) string {
	if s == "" {
		return ""
	}
	s = strings.ReplaceAll(oneLine(s), "|", `\|`)
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") {
		s = " " + s + " " // CommonMark strips one space each side
	}
	return fence + s + fence
}

// oneLine replaces line breaks with spaces: a report's line is the program's for one line only.
func oneLine(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}
