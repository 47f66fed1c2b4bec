package kcllib_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib/gpyrpc"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

// These tests call the real engine ($KCL_LIB, else bin/libkcl.so; `make libkcl` fetches it).

func service(t *testing.T) kcllib.CallFunc {
	t.Helper()
	p, err := kcllib.Find(filepath.Join("..", "..", "bin", kcllib.LibName))
	if os.Getenv(kcllib.EnvLib) != "" {
		p, err = kcllib.Find("")
	}
	if err != nil {
		t.Fatalf("the KCL engine is needed for this test: %v", err)
	}
	l, err := kcllib.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	s := l.NewService()
	t.Cleanup(s.Close)
	return s.Call
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	kclmodtest.WriteFiles(t, dir, files)
}

// The engine is the one spec.proto was copied for: upgrading one without the other fails here.
func TestEngineMatchesSpec(t *testing.T) {
	v, err := kcllib.GetVersion(service(t))
	if err != nil {
		t.Fatal(err)
	}
	if v.Version != gpyrpc.SpecVersion || v.GitSha != gpyrpc.SpecCommit {
		t.Fatalf("the engine is KCL %s (%s), spec.proto is that of %s (%s): copy the engine's spec.proto "+
			"into internal/kcllib/gpyrpc and run make proto (see its README.md)", v.Version, v.GitSha, gpyrpc.SpecVersion, gpyrpc.SpecCommit)
	}
	if !strings.Contains(v.VersionInfo, v.GitSha) || v.Checksum == "" {
		t.Fatalf("version %+v", v)
	}
}

// Fields set in Go reach the engine, each changing the output: an argument, an external package, a
// path selector, sorted keys, hidden attributes, inline code, disable_none; and the four result
// fields (JSON, YAML, print() output, evaluation error) come back.
func TestExecProgramFieldsReachTheEngine(t *testing.T) {
	call := service(t)
	dir := t.TempDir()
	write(t, dir, map[string]string{
		"app/main.k":       "import helm.lib\n\nn = option(\"n\")\ncfg = {zeta = n + 1, alpha = lib.name, _hidden = \"h\"}\nother = 1\nprint(\"said\")\n",
		"ext/helm/kcl.mod": "[package]\nname = \"helm\"\nversion = \"0.1.0\"\n",
		"ext/helm/lib/a.k": "name = \"from-external\"\n",
	})
	main, helm := filepath.Join(dir, "app", "main.k"), []kcllib.ExternalPkg{{PkgName: "helm", PkgPath: filepath.Join(dir, "ext", "helm")}}
	res, err := kcllib.ExecProgram(call, &kcllib.ExecProgramArgs{
		KFilenameList: []string{main},
		Args:          []kcllib.Argument{{Name: "n", Value: "41"}},
		ExternalPkgs:  helm,
		PathSelector:  []string{"cfg"},
		SortKeys:      true,
		ShowHidden:    true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(res.YAMLResult), "_hidden: h\nalpha: from-external\nzeta: 42"; got != want {
		t.Errorf("YAML result %q, want %q", got, want)
	}
	if got, want := strings.Join(strings.Fields(res.JSONResult), ""), `{"_hidden":"h","alpha":"from-external","zeta":42}`; got != want {
		t.Errorf("JSON result %q, want %q", got, want)
	}
	if strings.TrimSpace(res.LogMessage) != "said" || res.ErrMessage != "" {
		t.Errorf("log %q, error %q", res.LogMessage, res.ErrMessage)
	}

	// Code given inline (k_code_list) stands for the file; disable_none drops d.
	res, err = kcllib.ExecProgram(call, &kcllib.ExecProgramArgs{
		KFilenameList: []string{filepath.Join(dir, "app", "inline.k")},
		KCodeList:     []string{"a = {b = 1, _c = 2}\nd = None\n"},
		DisableNone:   true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(res.YAMLResult); got != "a:\n  b: 1" {
		t.Errorf("inline code: YAML result %q", got)
	}
	// Without the argument, n is None: the engine reports the evaluation error in err_message.
	res, err = kcllib.ExecProgram(call, &kcllib.ExecProgramArgs{KFilenameList: []string{main}, ExternalPkgs: helm})
	if err != nil || res.YAMLResult != "" || !strings.Contains(res.ErrMessage, "unsupported operand type(s) for +: 'NoneType' and 'int'") {
		t.Errorf("without the argument: %+v, %v", res, err)
	}
}

// Every field of a kcl.yaml the engine reads reaches Go.
func TestLoadSettingsFilesFieldsReachGo(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"a.k": "a = 1\n", "b.k": "b = 2\n", "kcl.yaml": `kcl_cli_configs:
  files:
    - a.k
    - b.k
  output: out.yaml
  overrides:
    - app.replicas=2
  path_selector:
    - app
  strict_range_check: true
  disable_none: true
  verbose: 3
  debug: true
  sort_keys: true
  show_hidden: true
  include_schema_type_path: true
  fast_eval: true
kcl_options:
  - key: env
    value: prod
  - key: n
    value: 3
`})
	res, err := kcllib.LoadSettingsFiles(service(t), &kcllib.LoadSettingsFilesArgs{WorkDir: dir, Files: []string{filepath.Join(dir, "kcl.yaml")}})
	if err != nil {
		t.Fatal(err)
	}
	want := &kcllib.LoadSettingsFilesResult{
		KclCliConfigs: kcllib.CliConfig{
			Files: []string{filepath.Join(dir, "a.k"), filepath.Join(dir, "b.k")}, Output: "out.yaml", Overrides: []string{"app.replicas=2"},
			PathSelector: []string{"app"}, StrictRangeCheck: true, DisableNone: true, Verbose: 3, Debug: true,
			SortKeys: true, ShowHidden: true, IncludeSchemaTypePath: true, FastEval: true,
		},
		KclOptions: []kcllib.KeyValuePair{{Key: "env", Value: `"prod"`}, {Key: "n", Value: "3"}},
	}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("got  %+v\nwant %+v", res, want)
	}
}
