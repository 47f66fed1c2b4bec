package fluxkcl

import (
	"fmt"
	"io"

	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

// logger prints flux's progress lines (cmd/flux/log.go: ► ✚ ◎ ✔ ⚠️ ✗) on stderr, so that stdout
// stays data.
type logger struct{ w io.Writer }

func (l logger) Actionf(format string, a ...any)  { l.print("►", format, a...) }
func (l logger) Waitingf(format string, a ...any) { l.print("◎", format, a...) }
func (l logger) Successf(format string, a ...any) { l.print("✔", format, a...) }
func (l logger) Warningf(format string, a ...any) { l.print("⚠️", format, a...) }
func (l logger) Failuref(format string, a ...any) { l.print("✗", format, a...) }

// print writes one line: the arguments are often a tenant's text (a revision, a Ready message),
// which must neither start a line of its own nor reach the terminal as controls.
func (l logger) print(mark, format string, a ...any) {
	fmt.Fprintln(l.w, mark, termsafe.Line(fmt.Sprintf(format, a...)))
}
