package kcllib

import (
	"fmt"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib/gpyrpc"
)

// The messages below are the subset of KCL's gpyrpc spec this project needs, as plain Go values.
// They are encoded and decoded through the Go types protoc-gen-go generates from the engine's own
// spec.proto (package gpyrpc, `make proto`): the wire format is the spec's, never written here.

// Argument is gpyrpc.Argument: a top-level argument, `-D name=value`.
type Argument struct {
	Name  string
	Value string
}

// ExternalPkg is gpyrpc.ExternalPkg: a package name mapped to a directory, `-E name=path`.
type ExternalPkg struct {
	PkgName string
	PkgPath string
}

// ExecProgramArgs is gpyrpc.ExecProgramArgs.
type ExecProgramArgs struct {
	WorkDir               string
	KFilenameList         []string
	KCodeList             []string
	Args                  []Argument
	Overrides             []string
	DisableYAMLResult     bool
	PrintOverrideAST      bool
	StrictRangeCheck      bool
	DisableNone           bool
	Verbose               int32
	Debug                 int32
	SortKeys              bool
	ExternalPkgs          []ExternalPkg
	IncludeSchemaTypePath bool
	CompileOnly           bool
	ShowHidden            bool
	PathSelector          []string
	FastEval              bool
}

// ExecProgramResult is gpyrpc.ExecProgramResult.
type ExecProgramResult struct {
	JSONResult string
	YAMLResult string
	LogMessage string // print() output
	ErrMessage string
}

// LoadSettingsFilesArgs is gpyrpc.LoadSettingsFilesArgs.
type LoadSettingsFilesArgs struct {
	WorkDir string
	Files   []string
}

// CliConfig is gpyrpc.CliConfig: the kcl_cli_configs section of a kcl.yaml settings file.
type CliConfig struct {
	Files                 []string
	Output                string
	Overrides             []string
	PathSelector          []string
	StrictRangeCheck      bool
	DisableNone           bool
	Verbose               int64
	Debug                 bool
	SortKeys              bool
	ShowHidden            bool
	IncludeSchemaTypePath bool
	FastEval              bool
}

// KeyValuePair is gpyrpc.KeyValuePair.
type KeyValuePair struct {
	Key   string
	Value string
}

// LoadSettingsFilesResult is gpyrpc.LoadSettingsFilesResult.
type LoadSettingsFilesResult struct {
	KclCliConfigs CliConfig
	KclOptions    []KeyValuePair
}

// GetVersionResult is gpyrpc.GetVersionResult.
type GetVersionResult struct {
	Version     string
	Checksum    string
	GitSha      string
	VersionInfo string
}

// Marshal encodes the message. It fails only on a string that is not valid UTF-8, which proto3
// forbids (the engine would refuse it too).
func (a *ExecProgramArgs) Marshal() ([]byte, error) {
	m := &gpyrpc.ExecProgramArgs{
		WorkDir:               a.WorkDir,
		KFilenameList:         a.KFilenameList,
		KCodeList:             a.KCodeList,
		Overrides:             a.Overrides,
		DisableYamlResult:     a.DisableYAMLResult,
		PrintOverrideAst:      a.PrintOverrideAST,
		StrictRangeCheck:      a.StrictRangeCheck,
		DisableNone:           a.DisableNone,
		Verbose:               a.Verbose,
		Debug:                 a.Debug,
		SortKeys:              a.SortKeys,
		IncludeSchemaTypePath: a.IncludeSchemaTypePath,
		CompileOnly:           a.CompileOnly,
		ShowHidden:            a.ShowHidden,
		PathSelector:          a.PathSelector,
		FastEval:              a.FastEval,
	}
	for _, arg := range a.Args {
		m.Args = append(m.Args, &gpyrpc.Argument{Name: arg.Name, Value: arg.Value})
	}
	for _, p := range a.ExternalPkgs {
		m.ExternalPkgs = append(m.ExternalPkgs, &gpyrpc.ExternalPkg{PkgName: p.PkgName, PkgPath: p.PkgPath})
	}
	return marshal(m)
}

// Marshal encodes the message. It fails only on a string that is not valid UTF-8.
func (a *LoadSettingsFilesArgs) Marshal() ([]byte, error) {
	return marshal(&gpyrpc.LoadSettingsFilesArgs{WorkDir: a.WorkDir, Files: a.Files})
}

func marshal(m proto.Message) ([]byte, error) {
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return b, nil
}

func unmarshal(b []byte, m proto.Message) error {
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("decoding kcl result %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

// Unmarshal decodes the message. The strings share b's memory instead of copying it: an output
// can be tens of megabytes, and the caller must hold it once only. b must not change afterwards.
func (r *ExecProgramResult) Unmarshal(b []byte) error {
	var m gpyrpc.ExecProgramResult
	if err := unmarshalAliased(b, &m); err != nil {
		return err
	}
	*r = ExecProgramResult{JSONResult: m.JsonResult, YAMLResult: m.YamlResult, LogMessage: m.LogMessage, ErrMessage: m.ErrMessage}
	return nil
}

// Unmarshal decodes the message.
func (r *GetVersionResult) Unmarshal(b []byte) error {
	var m gpyrpc.GetVersionResult
	if err := unmarshal(b, &m); err != nil {
		return err
	}
	*r = GetVersionResult{Version: m.Version, Checksum: m.Checksum, GitSha: m.GitSha, VersionInfo: m.VersionInfo}
	return nil
}

// Unmarshal decodes the message.
func (r *LoadSettingsFilesResult) Unmarshal(b []byte) error {
	var m gpyrpc.LoadSettingsFilesResult
	if err := unmarshal(b, &m); err != nil {
		return err
	}
	*r = LoadSettingsFilesResult{}
	if c := m.KclCliConfigs; c != nil {
		r.KclCliConfigs = CliConfig{
			Files:                 c.Files,
			Output:                c.Output,
			Overrides:             c.Overrides,
			PathSelector:          c.PathSelector,
			StrictRangeCheck:      c.StrictRangeCheck,
			DisableNone:           c.DisableNone,
			Verbose:               c.Verbose,
			Debug:                 c.Debug,
			SortKeys:              c.SortKeys,
			ShowHidden:            c.ShowHidden,
			IncludeSchemaTypePath: c.IncludeSchemaTypePath,
			FastEval:              c.FastEval,
		}
	}
	for _, kv := range m.KclOptions {
		r.KclOptions = append(r.KclOptions, KeyValuePair{Key: kv.Key, Value: kv.Value})
	}
	return nil
}

// unmarshalAliased decodes b into m as proto.Unmarshal does, except that m's singular string
// fields share b's memory instead of copying it; every other field goes through proto.Unmarshal.
// Field numbers and types come from m's generated descriptor.
func unmarshalAliased(b []byte, m proto.Message) error {
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	fail := func(err error) error {
		return fmt.Errorf("decoding kcl result %s: %w", r.Descriptor().FullName(), err)
	}
	var rest []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fail(protowire.ParseError(n))
		}
		l := protowire.ConsumeFieldValue(num, typ, b[n:])
		if l < 0 {
			return fail(protowire.ParseError(l))
		}
		if fd := fields.ByNumber(num); fd != nil && typ == protowire.BytesType && fd.Kind() == protoreflect.StringKind &&
			fd.Cardinality() != protoreflect.Repeated && fd.ContainingOneof() == nil {
			v, _ := protowire.ConsumeBytes(b[n:])
			if !utf8.Valid(v) {
				return fail(fmt.Errorf("field %s: invalid UTF-8", fd.Name()))
			}
			var s string
			if len(v) > 0 {
				s = unsafe.String(&v[0], len(v))
			}
			r.Set(fd, protoreflect.ValueOfString(s))
		} else {
			rest = append(rest, b[:n+l]...)
		}
		b = b[n+l:]
	}
	if len(rest) > 0 {
		if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(rest, m); err != nil {
			return fail(err)
		}
	}
	return nil
}

// WithoutJSONResult returns an ExecProgramResult message without its JSON result: the engine
// always answers with both forms, and a caller that wants YAML only should not carry the output
// twice. Fields this package does not know are kept.
func WithoutJSONResult(b []byte) ([]byte, error) {
	var m gpyrpc.ExecProgramResult
	if err := unmarshalAliased(b, &m); err != nil {
		return nil, err
	}
	m.JsonResult = ""
	return marshal(&m)
}
