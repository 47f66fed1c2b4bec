package render

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
)

// Error is a failure reported by KCL for the program (syntax, type, evaluation), with colour codes
// removed. Other errors (missing files, a lost worker) are returned as they are.
type Error struct{ Message string }

func (e *Error) Error() string { return e.Message }

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// CleanMessage strips ANSI colour codes and trailing blank lines from an engine message.
func CleanMessage(s string) string {
	return strings.TrimRight(ansi.ReplaceAllString(s, ""), "\n\t ")
}

// Render runs the program described by o.
func Render(ctx context.Context, eng Engine, o Options) (*Result, error) {
	call := func(method string, args []byte) ([]byte, error) { return eng.Call(ctx, method, args) }
	args, err := execArgs(call, o)
	if err != nil {
		return nil, err
	}
	res, err := kcllib.ExecProgram(call, args)
	if err != nil {
		return nil, engineError(err)
	}
	if res.ErrMessage != "" {
		return nil, &Error{Message: CleanMessage(res.ErrMessage)}
	}
	out := res.YAMLResult
	if o.Format == FormatJSON {
		out = res.JSONResult
	} else if strings.TrimSpace(out) == "{}" {
		// A program without top-level attributes renders nothing, as kcl prints it.
		out = ""
	}
	if out != "" && !strings.HasSuffix(out, "\n") {
		out += "\n"
	}
	return &Result{Output: out, Log: res.LogMessage}, nil
}

// engineError turns an `ERROR:` answer about the program into an *Error; a lost worker stays as is.
func engineError(err error) error {
	var e *kcllib.EngineError
	if errors.As(err, &e) {
		return &Error{Message: CleanMessage(e.Message)}
	}
	return err
}

// execArgs builds the engine arguments: settings files first, then explicit options on top, as
// kcl merges `-Y` with the other flags.
func execArgs(call kcllib.CallFunc, o Options) (*kcllib.ExecProgramArgs, error) {
	dir := o.Dir
	if dir == "" {
		dir = "."
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	a := &kcllib.ExecProgramArgs{
		Overrides: o.Overrides, PathSelector: o.PathSelectors,
		SortKeys: o.SortKeys, DisableNone: o.DisableNone, ShowHidden: o.ShowHidden,
		StrictRangeCheck: o.StrictRangeCheck,
	}
	if o.Debug {
		a.Debug = 1
	}
	inputs := o.Inputs
	if len(o.Settings) > 0 {
		settingsFiles, err := applySettings(call, dir, o.Settings, a)
		if err != nil {
			return nil, err
		}
		if len(inputs) == 0 {
			inputs = settingsFiles
		}
	}
	if len(inputs) == 0 {
		inputs = []string{dir}
	}
	for _, e := range o.Externals {
		a.ExternalPkgs = append(a.ExternalPkgs, kcllib.ExternalPkg{PkgName: e.PkgName, PkgPath: absPath(dir, e.PkgPath)})
	}
	for _, arg := range o.Arguments {
		a.Args = append(a.Args, kcllib.Argument{Name: arg.Name, Value: literal(arg.Value)})
	}
	// Inputs are absolute, so the engine needs no work_dir; kcl leaves it unset too, and
	// file.workdir() is then empty, as with kcl.
	a.KFilenameList, err = expandInputs(dir, inputs)
	return a, err
}

// applySettings loads kcl.yaml files into a and returns the files they name, made absolute
// against the directory of the settings file that names them.
func applySettings(call kcllib.CallFunc, dir string, settings []string, a *kcllib.ExecProgramArgs) ([]string, error) {
	var files []string
	for _, s := range settings {
		path := absPath(dir, s)
		res, err := kcllib.LoadSettingsFiles(call, &kcllib.LoadSettingsFilesArgs{WorkDir: filepath.Dir(path), Files: []string{path}})
		if err != nil {
			return nil, fmt.Errorf("loading settings %s: %w", s, engineError(err))
		}
		c := res.KclCliConfigs
		for _, f := range c.Files {
			files = append(files, absPath(filepath.Dir(path), f))
		}
		a.Overrides = append(c.Overrides, a.Overrides...)
		a.PathSelector = append(c.PathSelector, a.PathSelector...)
		a.StrictRangeCheck = a.StrictRangeCheck || c.StrictRangeCheck
		a.DisableNone = a.DisableNone || c.DisableNone
		a.SortKeys = a.SortKeys || c.SortKeys
		a.ShowHidden = a.ShowHidden || c.ShowHidden
		a.IncludeSchemaTypePath = a.IncludeSchemaTypePath || c.IncludeSchemaTypePath
		if c.Debug {
			a.Debug = 1
		}
		for _, kv := range res.KclOptions {
			a.Args = append(a.Args, kcllib.Argument{Name: kv.Key, Value: kv.Value})
		}
	}
	return files, nil
}

// literal spells KCL's own constants as the JSON the engine parses argument values with, so
// `-D flag=True` is a bool and `-D x=None` is None, as kcl types them; anything else the engine
// reads as JSON when it is JSON, and as a string otherwise.
func literal(v string) string {
	switch v {
	case "True":
		return "true"
	case "False":
		return "false"
	case "None":
		return "null"
	}
	return v
}
