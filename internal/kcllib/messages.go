package kcllib

import (
	"fmt"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// The messages below are the subset of KCL's public gpyrpc spec (spec.proto) this project needs,
// encoded by hand with protowire: the generated Go code lives in kcl-go, which cannot be fetched
// here. Field numbers are those of spec.proto; only set fields are encoded, as proto3 does.

// Argument is a top-level argument, `-D name=value`.
type Argument struct {
	Name  string
	Value string
}

// ExternalPkg maps a package name to a directory, `-E name=path`.
type ExternalPkg struct {
	PkgName string
	PkgPath string
}

// ExecProgramArgs is gpyrpc.ExecProgramArgs.
type ExecProgramArgs struct {
	WorkDir               string        // 1
	KFilenameList         []string      // 2
	KCodeList             []string      // 3
	Args                  []Argument    // 4
	Overrides             []string      // 5
	DisableYAMLResult     bool          // 6
	PrintOverrideAST      bool          // 7
	StrictRangeCheck      bool          // 8
	DisableNone           bool          // 9
	Verbose               int32         // 10
	Debug                 int32         // 11
	SortKeys              bool          // 12
	ExternalPkgs          []ExternalPkg // 13
	IncludeSchemaTypePath bool          // 14
	CompileOnly           bool          // 15
	ShowHidden            bool          // 16
	PathSelector          []string      // 17
	FastEval              bool          // 18
}

// ExecProgramResult is gpyrpc.ExecProgramResult.
type ExecProgramResult struct {
	JSONResult string // 1
	YAMLResult string // 2
	LogMessage string // 3: print() output
	ErrMessage string // 4
}

// LoadSettingsFilesArgs is gpyrpc.LoadSettingsFilesArgs.
type LoadSettingsFilesArgs struct {
	WorkDir string   // 1
	Files   []string // 2
}

// CliConfig is gpyrpc.CliConfig: the kcl_cli_configs section of a kcl.yaml settings file.
type CliConfig struct {
	Files                 []string // 1
	Output                string   // 2
	Overrides             []string // 3
	PathSelector          []string // 4
	StrictRangeCheck      bool     // 5
	DisableNone           bool     // 6
	Verbose               int64    // 7
	Debug                 bool     // 8
	SortKeys              bool     // 9
	ShowHidden            bool     // 10
	IncludeSchemaTypePath bool     // 11
	FastEval              bool     // 12
}

// KeyValuePair is gpyrpc.KeyValuePair.
type KeyValuePair struct {
	Key   string
	Value string
}

// LoadSettingsFilesResult is gpyrpc.LoadSettingsFilesResult.
type LoadSettingsFilesResult struct {
	KclCliConfigs CliConfig      // 1
	KclOptions    []KeyValuePair // 2
}

// GetVersionResult is gpyrpc.GetVersionResult.
type GetVersionResult struct {
	Version     string // 1
	Checksum    string // 2
	GitSha      string // 3
	VersionInfo string // 4
}

type encoder struct{ b []byte }

func (e *encoder) str(n protowire.Number, v string) {
	if v != "" {
		e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
		e.b = protowire.AppendString(e.b, v)
	}
}

func (e *encoder) strs(n protowire.Number, vs []string) {
	for _, v := range vs {
		e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
		e.b = protowire.AppendString(e.b, v)
	}
}

func (e *encoder) msg(n protowire.Number, m []byte) {
	e.b = protowire.AppendTag(e.b, n, protowire.BytesType)
	e.b = protowire.AppendBytes(e.b, m)
}

func (e *encoder) boolean(n protowire.Number, v bool) {
	if v {
		e.b = protowire.AppendTag(e.b, n, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, 1)
	}
}

func (e *encoder) int(n protowire.Number, v int64) {
	if v != 0 {
		e.b = protowire.AppendTag(e.b, n, protowire.VarintType)
		e.b = protowire.AppendVarint(e.b, uint64(v))
	}
}

func pair(a, b string) []byte {
	var e encoder
	e.str(1, a)
	e.str(2, b)
	return e.b
}

// Marshal encodes the message.
func (a *ExecProgramArgs) Marshal() []byte {
	var e encoder
	e.str(1, a.WorkDir)
	e.strs(2, a.KFilenameList)
	e.strs(3, a.KCodeList)
	for _, arg := range a.Args {
		e.msg(4, pair(arg.Name, arg.Value))
	}
	e.strs(5, a.Overrides)
	e.boolean(6, a.DisableYAMLResult)
	e.boolean(7, a.PrintOverrideAST)
	e.boolean(8, a.StrictRangeCheck)
	e.boolean(9, a.DisableNone)
	e.int(10, int64(a.Verbose))
	e.int(11, int64(a.Debug))
	e.boolean(12, a.SortKeys)
	for _, p := range a.ExternalPkgs {
		e.msg(13, pair(p.PkgName, p.PkgPath))
	}
	e.boolean(14, a.IncludeSchemaTypePath)
	e.boolean(15, a.CompileOnly)
	e.boolean(16, a.ShowHidden)
	e.strs(17, a.PathSelector)
	e.boolean(18, a.FastEval)
	return e.b
}

// Marshal encodes the message.
func (a *LoadSettingsFilesArgs) Marshal() []byte {
	var e encoder
	e.str(1, a.WorkDir)
	e.strs(2, a.Files)
	return e.b
}

// field is one decoded field: a varint or a length-delimited payload.
type field struct {
	num    protowire.Number
	varint uint64
	bytes  []byte
}

// fields decodes the top level of a message, skipping wire types this spec does not use.
func fields(b []byte) ([]field, error) {
	var out []field
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("decoding kcl result: %w", protowire.ParseError(n))
		}
		b = b[n:]
		f := field{num: num}
		switch typ {
		case protowire.VarintType:
			f.varint, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			f.bytes, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil, fmt.Errorf("decoding kcl result field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		out = append(out, f)
	}
	return out, nil
}

// stringFields decodes a message made only of string fields numbered 1, 2, ... into dst.
func stringFields(b []byte, dst ...*string) error {
	fs, err := fields(b)
	for _, f := range fs {
		if i := int(f.num) - 1; i >= 0 && i < len(dst) {
			*dst[i] = string(f.bytes)
		}
	}
	return err
}

// Unmarshal decodes the message. The strings share b's memory instead of copying it: an output
// can be tens of megabytes, and the caller must hold it once only. b must not change afterwards.
func (r *ExecProgramResult) Unmarshal(b []byte) error {
	fs, err := fields(b)
	dst := []*string{&r.JSONResult, &r.YAMLResult, &r.LogMessage, &r.ErrMessage}
	for _, f := range fs {
		if i := int(f.num) - 1; i >= 0 && i < len(dst) && len(f.bytes) > 0 {
			*dst[i] = unsafe.String(&f.bytes[0], len(f.bytes))
		}
	}
	return err
}

// Unmarshal decodes the message.
func (r *GetVersionResult) Unmarshal(b []byte) error {
	return stringFields(b, &r.Version, &r.Checksum, &r.GitSha, &r.VersionInfo)
}

// Unmarshal decodes the message.
func (r *LoadSettingsFilesResult) Unmarshal(b []byte) error {
	fs, err := fields(b)
	if err != nil {
		return err
	}
	for _, f := range fs {
		switch f.num {
		case 1:
			if err := r.KclCliConfigs.unmarshal(f.bytes); err != nil {
				return err
			}
		case 2:
			kv, err := fields(f.bytes)
			if err != nil {
				return err
			}
			var p KeyValuePair
			for _, g := range kv {
				switch g.num {
				case 1:
					p.Key = string(g.bytes)
				case 2:
					p.Value = string(g.bytes)
				}
			}
			r.KclOptions = append(r.KclOptions, p)
		}
	}
	return nil
}

func (c *CliConfig) unmarshal(b []byte) error {
	fs, err := fields(b)
	for _, f := range fs {
		switch f.num {
		case 1:
			c.Files = append(c.Files, string(f.bytes))
		case 2:
			c.Output = string(f.bytes)
		case 3:
			c.Overrides = append(c.Overrides, string(f.bytes))
		case 4:
			c.PathSelector = append(c.PathSelector, string(f.bytes))
		case 5:
			c.StrictRangeCheck = f.varint != 0
		case 6:
			c.DisableNone = f.varint != 0
		case 7:
			c.Verbose = int64(f.varint)
		case 8:
			c.Debug = f.varint != 0
		case 9:
			c.SortKeys = f.varint != 0
		case 10:
			c.ShowHidden = f.varint != 0
		case 11:
			c.IncludeSchemaTypePath = f.varint != 0
		case 12:
			c.FastEval = f.varint != 0
		}
	}
	return err
}

// WithoutJSONResult returns an ExecProgramResult message without its JSON result: the engine
// always answers with both forms, and a caller that wants YAML only should not carry the output
// twice.
func WithoutJSONResult(b []byte) ([]byte, error) {
	out := make([]byte, 0, len(b))
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return nil, fmt.Errorf("decoding kcl result: %w", protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if m < 0 {
			return nil, fmt.Errorf("decoding kcl result field %d: %w", num, protowire.ParseError(m))
		}
		if num != 1 {
			out = append(out, rest[:n+m]...)
		}
		rest = rest[n+m:]
	}
	return out, nil
}
