package fluxkcl

import (
	"io"
	"regexp"
	"strings"
	"unicode/utf8"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

// printTable prints rows under headers as flux's tables do (olekukonko/tablewriter without
// borders, padding "\t"): upper-case headers, cells left-aligned and padded with spaces to the
// column's width, columns apart by a tab. Cells hold what tenants write (revisions, messages,
// events): each is escaped to one cell of one line, so that no value forges a row or a column.
func printTable(w io.Writer, headers []string, rows [][]string) error {
	all := make([][]string, 0, len(rows)+1)
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, cell := range r {
			cells[i] = termsafe.Line(cell)
		}
		all = append(all, cells)
	}
	if headers != nil {
		h := make([]string, len(headers))
		for i := range headers {
			h[i] = strings.ToUpper(headers[i])
		}
		all = append([][]string{h}, all...)
	}
	widths := columnWidths(all)
	var b strings.Builder
	for _, r := range all {
		for i, cell := range r {
			if i == len(r)-1 {
				b.WriteString(cell)
				break
			}
			b.WriteString(cell + strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell)) + "\t")
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func columnWidths(rows [][]string) []int {
	var widths []int
	for _, r := range rows {
		for i, cell := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	return widths
}

// hexRegexp is flux's (internal/utils/hex.go): hex strings of SHA-1 up to SHA-512.
var hexRegexp = regexp.MustCompile(`\b[a-f0-9]{40,128}\b`)

// truncateHex shortens digests to 8 characters, as flux get does.
func truncateHex(s string) string {
	return hexRegexp.ReplaceAllStringFunc(s, func(h string) string { return h[:8] })
}

// readyStatus is flux get's READY and MESSAGE (cmd/flux/get.go statusAndMessage).
func readyStatus(conds []metav1.Condition) (string, string) {
	if c := apimeta.FindStatusCondition(conds, "Ready"); c != nil {
		return string(c.Status), c.Message
	}
	return string(metav1.ConditionFalse), "waiting to be reconciled"
}

// boolText is flux's "True"/"False".
func boolText(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
