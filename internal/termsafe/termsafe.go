// Package termsafe makes text that someone else wrote safe to print on a human's terminal.
//
// A tenant writes what the operator reads: a source revision, a status message, an inventory
// entry, an Event, a program's print output and assert messages. Printed raw, an ESC or C1
// control starts a sequence the terminal obeys (clear the screen, set the title, plant an OSC 8
// hyperlink), a bidirectional control makes text read otherwise than it is, and a line feed or a
// tab starts a row or a cell of its own. Every such character is shown instead as a visible
// escape: \x1b, \u202e, \n.
//
// Backslashes are left as they are, so that escaping twice (the render escapes its stderr, and
// the plugin that passes it on escapes it again) changes nothing the second time. An escape can
// then not be told from the same characters typed literally; what matters here is that neither
// reaches the terminal as a control.
package termsafe

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Line is s as one line and one table cell: every control, format and bidirectional character,
// line and paragraph separator, invalid UTF-8 byte, and also line feed, carriage return and tab,
// shown as an escape. For table cells, tree nodes, progress and error lines.
func Line(s string) string { return escape(s, false) }

// Text is s escaped as Line does, except that line feeds and tabs are kept: for text that is
// printed as lines of its own (a program's print output, an engine's error with its source
// excerpt, a diff). A carriage return is still escaped: it would overwrite the line.
func Text(s string) string { return escape(s, true) }

// Unsafe reports whether r is shown as an escape (line feed and tab included).
func Unsafe(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) ||
		// Cf holds the bidirectional controls (U+061C, U+200E/F, U+202A-E, U+2066-9), the
		// zero-width characters and the tag characters; Zl and Zp end a line in some terminals
		unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Bidi_Control)
}

func escape(s string, keepLayout bool) string {
	if isSafe(s, keepLayout) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLayout && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && Unsafe(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff && Unsafe(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		case Unsafe(r):
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// isSafe is the common case, checked without allocating: nothing to escape.
func isSafe(s string, keepLayout bool) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 || c == 0x7f) && !(keepLayout && (c == '\n' || c == '\t')) {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || Unsafe(r) {
			return false
		}
		i += size
	}
	return true
}

// Writer escapes what is written through it as Text does. A character cut between two writes
// is held until the next one completes it; Flush writes what is still held, escaped as the
// invalid bytes it then is.
type Writer struct {
	w    io.Writer
	held []byte
}

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p and writes it; it reports all of p written when the escaped text was.
func (w *Writer) Write(p []byte) (int, error) {
	buf := append(w.held, p...)
	cut := completeUpTo(buf)
	text := Text(string(buf[:cut]))
	w.held = append([]byte(nil), buf[cut:]...)
	if _, err := io.WriteString(w.w, text); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes the bytes held back, which no later write completed.
func (w *Writer) Flush() error {
	if len(w.held) == 0 {
		return nil
	}
	text := Text(string(w.held))
	w.held = nil
	_, err := io.WriteString(w.w, text)
	return err
}

// completeUpTo is the length of buf without an incomplete UTF-8 sequence at its end.
func completeUpTo(buf []byte) int {
	for back := 1; back <= utf8.UTFMax-1 && back <= len(buf); back++ {
		i := len(buf) - back
		if utf8.RuneStart(buf[i]) {
			if buf[i] >= utf8.RuneSelf && !utf8.FullRune(buf[i:]) {
				return i
			}
			break
		}
	}
	return len(buf)
}

// csi matches a CSI sequence with numeric parameters: colours and cursor movements.
var csi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// StripCSI removes CSI sequences with numeric parameters. The KCL engine colours its messages
// with them; escaped, they would bury the message under \x1b[31m. Every other control stays,
// for Line or Text to escape.
func StripCSI(s string) string { return csi.ReplaceAllString(s, "") }
