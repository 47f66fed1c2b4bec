package ui

import (
	"bytes"
	"embed"
	"html/template"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

//go:embed templates/*.html
var templateFS embed.FS

// templates are parsed once: a template that does not parse fails every test at init.
var templates = template.Must(template.New("").Funcs(template.FuncMap{
	"firstLine": firstLine,
	"plural":    plural,
	"add1":      func(n int) int { return n + 1 },
	"shortRev":  shortRev,
}).ParseFS(templateFS, "templates/*.html"))

// render builds the page in memory before sending it, so that a failure still gets a proper
// status instead of half a page.
func (h *handler) render(w http.ResponseWriter, status int, name string, data any) {
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, data); err != nil {
		h.log.Error(err, "rendering a page", "template", name)
		http.Error(w, "cannot render the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// Status changes with every reconciliation, and pages may show Secret values when masking
	// is off: nothing is kept by the browser or a proxy.
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

type errorData struct {
	pageBase
	Status  int
	Message string
}

func (h *handler) errorPage(w http.ResponseWriter, status int, title, message string) {
	h.render(w, status, "error", errorData{pageBase: h.base(title), Status: status, Message: message})
}

// firstLine shortens a condition message for the list: KCL errors run over many lines.
func firstLine(s string) string {
	line, _, more := strings.Cut(s, "\n")
	const max = 160
	if r := []rune(line); len(r) > max {
		line, more = string(r[:max]), true
	}
	if more {
		line += " …"
	}
	return line
}

// longHex is the hex of a digest or commit in a revision (main@sha1:<40 hex>).
var longHex = regexp.MustCompile(`(:[0-9a-f]{12})[0-9a-f]{8,}`)

// shortRev abbreviates the hashes of a revision where space is short (the compare form's
// choices); tables and headings show revisions whole.
func shortRev(s string) string { return longHex.ReplaceAllString(s, "$1…") }

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
