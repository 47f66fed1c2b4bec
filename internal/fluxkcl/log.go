package fluxkcl

import (
	"fmt"
	"io"
)

// logger prints flux's progress lines (cmd/flux/log.go: ► ✚ ◎ ✔ ⚠️ ✗) on stderr, so that stdout
// stays data.
type logger struct{ w io.Writer }

func (l logger) Actionf(format string, a ...any)  { l.print("►", format, a...) }
func (l logger) Waitingf(format string, a ...any) { l.print("◎", format, a...) }
func (l logger) Successf(format string, a ...any) { l.print("✔", format, a...) }
func (l logger) Warningf(format string, a ...any) { l.print("⚠️", format, a...) }
func (l logger) Failuref(format string, a ...any) { l.print("✗", format, a...) }

func (l logger) print(mark, format string, a ...any) {
	fmt.Fprintln(l.w, mark, fmt.Sprintf(format, a...))
}
