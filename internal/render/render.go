package render

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

// Error is a failure reported by KCL for the program (syntax, type, evaluation), with colour codes
// removed. Other errors (missing files, a lost worker) are returned as they are.
type Error struct{ Message string }

func (e *Error) Error() string { return e.Message }

// CleanMessage strips the engine's colour codes and trailing blank lines from an engine message,
// and shows every other control as an escape: the message quotes the program (an assert's text),
// and goes to conditions, events and terminals.
func CleanMessage(s string) string {
	return strings.TrimRight(termsafe.Text(termsafe.StripCSI(s)), "\n\t ")
}

// OutputTooLargeError is an output over Options.MaxOutput.
type OutputTooLargeError struct{ Size, Max int }

func (e *OutputTooLargeError) Error() string {
	return fmt.Sprintf("the rendered output is %d bytes, over the limit of %d bytes", e.Size, e.Max)
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
	if o.MaxOutput > 0 && len(out) > o.MaxOutput {
		return nil, &OutputTooLargeError{Size: len(out), Max: o.MaxOutput}
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
	c := &confiner{root: o.Root, modRoot: modRoot(dir, o.Root), externals: map[string]string{}}
	for _, e := range o.Externals {
		p, err := c.path("externals", dir, e.PkgPath)
		if err != nil {
			return nil, err
		}
		c.externals[e.PkgName] = p
		a.ExternalPkgs = append(a.ExternalPkgs, kcllib.ExternalPkg{PkgName: e.PkgName, PkgPath: p})
	}
	for _, e := range o.Dependencies {
		c.externals[e.PkgName] = e.PkgPath
		a.ExternalPkgs = append(a.ExternalPkgs, e)
	}
	inputs, field := o.Inputs, "entries"
	if len(o.Settings) > 0 {
		settingsFiles, err := applySettings(call, c, dir, o.Settings, a)
		if err != nil {
			return nil, err
		}
		if len(inputs) == 0 {
			inputs, field = settingsFiles, "files of the settings"
		}
	}
	if len(inputs) == 0 {
		inputs = []string{dir}
	}
	for _, arg := range o.Arguments {
		a.Args = append(a.Args, kcllib.Argument{Name: arg.Name, Value: literal(arg.Value)})
	}
	// Inputs are absolute, so the engine needs no work_dir; kcl leaves it unset too, and
	// file.workdir() is then empty, as with kcl.
	a.KFilenameList, err = expandInputs(c, field, dir, inputs)
	return a, err
}

// modRoot is what ${KCL_MOD} stands for: the nearest directory with a kcl.mod from dir up,
// not above root; dir itself when there is none.
func modRoot(dir, root string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, ModFile)); err == nil {
			return d
		}
		if d == root || filepath.Dir(d) == d {
			return dir
		}
	}
}

// applySettings loads kcl.yaml files into a and returns the files they name, made absolute
// against the directory of the settings file that names them.
func applySettings(call kcllib.CallFunc, c *confiner, dir string, settings []string, a *kcllib.ExecProgramArgs) ([]string, error) {
	var files []string
	for _, s := range settings {
		path, err := c.path("settings", dir, s)
		if err != nil {
			return nil, err
		}
		res, err := kcllib.LoadSettingsFiles(call, &kcllib.LoadSettingsFilesArgs{WorkDir: filepath.Dir(path), Files: []string{path}})
		if err != nil {
			return nil, fmt.Errorf("loading settings %s: %w", s, engineError(err))
		}
		cfg := res.KclCliConfigs
		for _, f := range cfg.Files {
			p, err := c.path("files of the settings "+s, filepath.Dir(path), f)
			if err != nil {
				return nil, err
			}
			files = append(files, p)
		}
		a.Overrides = append(cfg.Overrides, a.Overrides...)
		a.PathSelector = append(cfg.PathSelector, a.PathSelector...)
		a.StrictRangeCheck = a.StrictRangeCheck || cfg.StrictRangeCheck
		a.DisableNone = a.DisableNone || cfg.DisableNone
		a.SortKeys = a.SortKeys || cfg.SortKeys
		a.ShowHidden = a.ShowHidden || cfg.ShowHidden
		a.IncludeSchemaTypePath = a.IncludeSchemaTypePath || cfg.IncludeSchemaTypePath
		if cfg.Debug {
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
