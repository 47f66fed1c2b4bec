package termsafe

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLine(t *testing.T) {
	for in, want := range map[string]string{
		"main@sha1:0123abcd":                       "main@sha1:0123abcd",
		"héllo wörld ✔ ⚠️ 日本":                      "héllo wörld ✔ ⚠️ 日本",
		"\x1b[2J\x1b[H":                            `\x1b[2J\x1b[H`,
		"\x1b]0;title\x07":                         `\x1b]0;title\x07`,
		"\x1b]8;;http://evil\x07click\x1b]8;;\x07": `\x1b]8;;http://evil\x07click\x1b]8;;\x07`,
		"a\nb\rc\td":                               `a\nb\rc\td`,
		"del\x7f nul\x00":                          `del\x7f nul\x00`,
		"csi\u009b31m nel\u0085":                   `csi\u009b31m nel\u0085`,
		"exe.\u202egnp":                            `exe.\u202egnp`,
		"\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u202a\u202b\u202c\u202d": `\u2066\u2067\u2068\u2069\u200e\u200f\u061c\u202a\u202b\u202c\u202d`,
		"zero\u200bwidth\ufeff soft\u00ad":                                   `zero\u200bwidth\ufeff soft\u00ad`,
		"line\u2028para\u2029":                                               `line\u2028para\u2029`,
		"tag\U000e0041":                                                      `tag\U000e0041`,
		"bad\xffutf8\xc3":                                                    `bad\xffutf8\xc3`,
		"\ufffd is a character":                                              "\ufffd is a character",
		`a\x1b typed`:                                                        `a\x1b typed`,
	} {
		if got := Line(in); got != want {
			t.Errorf("Line(%q) = %q, want %q", in, got, want)
		}
		assertInert(t, Line(in), false)
	}
}

func TestText(t *testing.T) {
	in := "error\n --> main.k:1\n\t| assert \x1b]0;x\x07\r\n\u202e"
	want := "error\n --> main.k:1\n\t| assert \\x1b]0;x\\x07\\r\n\\u202e"
	if got := Text(in); got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
	assertInert(t, Text(in), true)
}

// Escaping twice changes nothing the second time: the render escapes its stderr, the plugin
// escapes it again.
func TestIdempotent(t *testing.T) {
	in := "\x1b]8;;http://evil\x07\u202e\n\t\xff\u0085"
	for _, f := range []func(string) string{Line, Text} {
		once := f(in)
		if twice := f(once); twice != once {
			t.Errorf("twice %q, once %q", twice, once)
		}
	}
}

// assertInert fails if s holds anything a terminal would act on.
func assertInert(t *testing.T, s string, keepLayout bool) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Errorf("%q is not valid UTF-8", s)
	}
	for _, r := range s {
		if Unsafe(r) && !(keepLayout && (r == '\n' || r == '\t')) {
			t.Errorf("%q holds %U", s, r)
		}
	}
}

func TestStripCSI(t *testing.T) {
	in := "\x1b[1;31merror\x1b[0m: \x1b]0;title\x07"
	if got, want := StripCSI(in), "error: \x1b]0;title\x07"; got != want {
		t.Errorf("StripCSI = %q, want %q", got, want)
	}
}

// A writer escapes as Text does whatever the writes' boundaries, a character cut in two
// included; Flush writes an incomplete character left at the end, escaped.
func TestWriter(t *testing.T) {
	in := "ok ✔\n\x1b]0;title\x07 \u202e日本\n\xe2\x80"
	for size := 1; size <= len(in); size++ {
		var out bytes.Buffer
		w := NewWriter(&out)
		for i := 0; i < len(in); i += size {
			n, err := w.Write([]byte(in[i:min(i+size, len(in))]))
			if err != nil || n != min(size, len(in)-i) {
				t.Fatalf("write %d: %d, %v", i, n, err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		want := "ok ✔\n\\x1b]0;title\\x07 \\u202e日本\n\\xe2\\x80"
		if out.String() != want {
			t.Fatalf("writes of %d bytes: %q, want %q", size, out.String(), want)
		}
	}
}

func TestLineIsOneCell(t *testing.T) {
	got := Line("row\tcell\nforged\tROW")
	if strings.ContainsAny(got, "\t\n\r") {
		t.Errorf("Line kept a tab or a line break: %q", got)
	}
}
