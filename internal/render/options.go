// Package render runs a KCL program the way `kcl run` does: it resolves the inputs (files, or a
// package directory and its kcl.mod entries), merges kcl.yaml settings with explicit options, and
// asks an engine for the YAML or JSON result. The CLI `render` and the controller share it.
package render

import (
	"context"
	"io"
	"strings"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
)

// Engine executes encoded engine calls; kclworker.Pool is the one used outside benchmarks.
type Engine interface {
	Call(ctx context.Context, method string, args []byte) ([]byte, error)
}

// Argument is a top-level argument (`-D name=value`): the engine's own, whose value Render
// spells as kcl run does (True, False and None become JSON) before the engine types it.
type Argument = kcllib.Argument

// Format of the rendered result.
const (
	FormatYAML = "yaml"
	FormatJSON = "json"
)

// Options mirror the flags of `kcl run`.
type Options struct {
	// Inputs are KCL files or package directories; none means Dir itself.
	Inputs []string
	// Dir resolves relative inputs and settings: the process directory for the CLI, the
	// package directory for the controller.
	Dir string
	// Root, when set, confines every path given to the engine (inputs, settings files and the
	// files they list, kcl.mod [profile] entries, externals) to this tree: the source, as the
	// controller stages it, or the working tree of `render --sandbox`.
	Root string

	Arguments     []Argument
	Settings      []string
	Overrides     []string
	PathSelectors []string
	Externals     []kcllib.ExternalPkg
	// Dependencies are the resolved kcl.mod dependencies, placed by the caller (staged beside
	// the source, or in the cache): externals exempt from the Root check.
	Dependencies     []kcllib.ExternalPkg
	SortKeys         bool
	DisableNone      bool
	ShowHidden       bool
	StrictRangeCheck bool
	Debug            bool
	Format           string
	// MaxOutput bounds the output in bytes (0: no bound).
	MaxOutput int
}

// Result is a successful render.
type Result struct {
	// Output is the YAML stream or JSON document; WriteOutput adds the final newline kcl prints.
	// It may share memory with the engine's answer: it is not copied.
	Output string
	// Log is what the program printed with print(), shown before the output by kcl.
	Log string
}

// WriteOutput writes the output as kcl prints it, ending with a newline.
func (r *Result) WriteOutput(w io.Writer) error {
	if _, err := io.WriteString(w, r.Output); err != nil {
		return err
	}
	if r.Output != "" && !strings.HasSuffix(r.Output, "\n") {
		_, err := io.WriteString(w, "\n")
		return err
	}
	return nil
}
