package ui

import (
	"html/template"
	"regexp"
	"strings"
)

// Classes of highlighted YAML, styled in layout.html.
const (
	classKey     = "k" // mapping keys
	classString  = "s" // quoted and plain strings, block scalar content
	classNumber  = "n"
	classLiteral = "b" // true, false, null
	classComment = "c"
	classDoc     = "d" // --- and ...
	classPunct   = "p" // -, :, |, >, {}, []
)

var (
	yamlNumber  = regexp.MustCompile(`^[-+]?(\.?[0-9][0-9_]*(\.[0-9_]*)?([eE][-+]?[0-9]+)?|0x[0-9a-fA-F_]+|0o[0-7_]+|\.inf|\.Inf|\.INF|\.nan|\.NaN|\.NAN)$`)
	yamlLiteral = map[string]bool{
		"true": true, "True": true, "TRUE": true, "false": true, "False": true, "FALSE": true,
		"null": true, "Null": true, "NULL": true, "~": true,
	}
)

// highlightYAML marks up YAML for reading. It works line by line, the way a reader scans YAML,
// and is not a parser: what it does not recognise is still escaped, only left uncoloured. It
// runs on the server so that pages need no script; every piece of text goes through
// template.HTMLEscapeString, since rendered YAML is untrusted.
func highlightYAML(src []byte) template.HTML {
	var b strings.Builder
	b.Grow(len(src) * 2)
	block := -1 // the column owning the block scalar (| or >) being read; -1 outside one
	for line := range strings.Lines(string(src)) {
		text := strings.TrimRight(line, "\r\n")
		if block >= 0 && (strings.TrimSpace(text) == "" || indentOf(text) > block) {
			span(&b, classString, text)
		} else {
			block = highlightLine(&b, text)
		}
		if strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	return template.HTML(b.String()) // safe: span and plain escape every piece of text
}

// highlightLine writes one line and returns the column owning a block scalar it opens, or -1.
func highlightLine(b *strings.Builder, text string) int {
	col := indentOf(text)
	b.WriteString(text[:col])
	rest := text[col:]
	if rest == "---" || rest == "..." || strings.HasPrefix(rest, "--- ") {
		span(b, classDoc, rest)
		return -1
	}
	// Sequence entries: "- ", possibly nested ("- - a"). A block scalar belongs to the last
	// dash, or to the key after it: its lines are indented further than that.
	owner := col
	for rest == "-" || strings.HasPrefix(rest, "- ") {
		span(b, classPunct, "-")
		n := 1 + indentOf(rest[1:])
		b.WriteString(rest[1:n])
		owner, rest, col = col, rest[n:], col+n
	}
	if key, value, ok := splitKey(rest); ok {
		span(b, classKey, key)
		span(b, classPunct, ":")
		owner, rest = col, value
	}
	return highlightValue(b, rest, owner)
}

// highlightValue writes what follows a key or a dash: a scalar, a block indicator, a comment.
// owner is the column of that key or dash.
func highlightValue(b *strings.Builder, s string, owner int) int {
	n := indentOf(s)
	b.WriteString(s[:n])
	s = s[n:]
	switch {
	case s == "":
	case s[0] == '#':
		span(b, classComment, s)
	case s[0] == '|' || s[0] == '>':
		ind, rest, _ := strings.Cut(s, " ")
		span(b, classPunct, ind)
		if rest != "" {
			b.WriteByte(' ')
			highlightValue(b, rest, owner)
		}
		return owner
	case s[0] == '"' || s[0] == '\'':
		end := quotedEnd(s)
		span(b, classString, s[:end])
		trailer(b, s[end:])
	case s == "{}" || s == "[]":
		span(b, classPunct, s)
	default:
		scalar, comment := cutComment(s)
		span(b, scalarClass(scalar), scalar)
		trailer(b, comment)
	}
	return -1
}

// trailer writes what follows a scalar on its line: spaces and a comment, or text it does not
// recognise.
func trailer(b *strings.Builder, s string) {
	n := indentOf(s)
	b.WriteString(s[:n])
	if strings.HasPrefix(s[n:], "#") {
		span(b, classComment, s[n:])
		return
	}
	plain(b, s[n:])
}

func scalarClass(s string) string {
	switch {
	case yamlLiteral[s]:
		return classLiteral
	case yamlNumber.MatchString(s):
		return classNumber
	}
	return classString
}

// splitKey splits `key: value` (or `key:` ending the line) into the key and what follows the
// colon. A colon counts only when followed by a space or the end of the line, as in YAML: URLs
// and images like nginx:1.27 are values.
func splitKey(s string) (key, value string, ok bool) {
	if s == "" || strings.ContainsRune("#{[|>&*!%@`", rune(s[0])) {
		return "", "", false
	}
	from := 0
	if s[0] == '"' || s[0] == '\'' {
		from = quotedEnd(s)
	}
	for i := from; i < len(s); i++ {
		if s[i] == '#' && i > 0 && s[i-1] == ' ' {
			return "", "", false // a comment before any colon
		}
		if s[i] == ':' && (i+1 == len(s) || s[i+1] == ' ') {
			return s[:i], s[i+1:], true
		}
		if from > 0 {
			return "", "", false // a quoted scalar that is not a key
		}
	}
	return "", "", false
}

// quotedEnd is the index just past the quoted scalar s starts with (the end of s when it is
// not closed on this line).
func quotedEnd(s string) int {
	q := s[0]
	for i := 1; i < len(s); i++ {
		switch {
		case q == '"' && s[i] == '\\':
			i++
		case q == '\'' && s[i] == '\'' && i+1 < len(s) && s[i+1] == '\'':
			i++
		case s[i] == q:
			return i + 1
		}
	}
	return len(s)
}

// cutComment splits a plain scalar from a trailing ` # comment`.
func cutComment(s string) (scalar, rest string) {
	if i := strings.Index(s, " #"); i >= 0 {
		return s[:i], s[i:]
	}
	return s, ""
}

func indentOf(s string) int {
	return len(s) - len(strings.TrimLeft(s, " "))
}

func span(b *strings.Builder, class, text string) {
	if text == "" {
		return
	}
	b.WriteString(`<span class="` + class + `">`)
	plain(b, text)
	b.WriteString("</span>")
}

func plain(b *strings.Builder, text string) {
	b.WriteString(template.HTMLEscapeString(text))
}

// diffLine is one line of a unified diff, with the class that colours it.
type diffLine struct {
	Class string // add, del, hunk or ctx
	Text  string
}

// diffLines splits a unified diff into classified lines. The `---`/`+++` file headers are
// dropped: the page titles each object's diff already, and a header would read as a change.
func diffLines(unified string) []diffLine {
	var out []diffLine
	inHunk := false
	for line := range strings.Lines(unified) {
		line = strings.TrimRight(line, "\n")
		c := "ctx"
		switch {
		case strings.HasPrefix(line, "@@"):
			c, inHunk = "hunk", true
		case !inHunk:
			continue
		case strings.HasPrefix(line, "+"):
			c = "add"
		case strings.HasPrefix(line, "-"):
			c = "del"
		}
		out = append(out, diffLine{Class: c, Text: line})
	}
	return out
}
