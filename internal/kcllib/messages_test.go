package kcllib_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib/gpyrpc"
)

// These tests check the package's Go messages against the generated gpyrpc types by field NAME
// (DisableYAMLResult is disable_yaml_result), independently of the conversions in messages.go:
// every Go field must exist in the spec with the same kind and survive the wire both ways.

func specName(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }

// specField returns the field of md named like the Go field f.
func specField(t *testing.T, md protoreflect.MessageDescriptor, f reflect.StructField) protoreflect.FieldDescriptor {
	t.Helper()
	fs := md.Fields()
	for i := range fs.Len() {
		if specName(string(fs.Get(i).Name())) == specName(f.Name) {
			return fs.Get(i)
		}
	}
	t.Fatalf("%s has no field for Go field %s", md.FullName(), f.Name)
	return nil
}

// checkKind fails unless a Go value of type typ is what the spec's fd holds.
func checkKind(t *testing.T, fd protoreflect.FieldDescriptor, typ reflect.Type) {
	t.Helper()
	if fd.IsList() != (typ.Kind() == reflect.Slice) {
		t.Fatalf("%s: repeated %v, Go type %v", fd.FullName(), fd.IsList(), typ)
	}
	if typ.Kind() == reflect.Slice {
		typ = typ.Elem()
	}
	want := map[protoreflect.Kind]reflect.Kind{
		protoreflect.StringKind: reflect.String, protoreflect.BoolKind: reflect.Bool,
		protoreflect.Int32Kind: reflect.Int32, protoreflect.Int64Kind: reflect.Int64,
		protoreflect.MessageKind: reflect.Struct,
	}[fd.Kind()]
	if typ.Kind() != want {
		t.Fatalf("%s is %v, Go type %v", fd.FullName(), fd.Kind(), typ)
	}
}

// fill sets the leaves of v (strings, bools, integers, slices, in nested structs too) to distinct
// non-zero values, each slice to two fully set elements: every leaf when only is 0, else only the
// only-th, so that two swapped bools show. It returns the number of leaves.
func fill(v reflect.Value, only int) int {
	var leaf, n int
	var walk func(v reflect.Value, inSlice bool)
	walk = func(v reflect.Value, inSlice bool) {
		n++
		if v.Kind() == reflect.Struct {
			for i := range v.NumField() {
				walk(v.Field(i), inSlice)
			}
			return
		}
		if !inSlice {
			if leaf++; only != 0 && leaf != only {
				return
			}
		}
		switch v.Kind() {
		case reflect.String:
			v.SetString(fmt.Sprintf("v%d-é", n))
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int32, reflect.Int64:
			v.SetInt(int64(n) * 1009)
		case reflect.Slice:
			s := reflect.MakeSlice(v.Type(), 2, 2)
			for i := range 2 {
				walk(s.Index(i), true)
			}
			v.Set(s)
		default:
			panic(v.Type())
		}
	}
	walk(v, false)
	return leaf
}

func scalar(v reflect.Value) protoreflect.Value {
	return protoreflect.ValueOf(v.Interface())
}

// toSpec sets m from the Go struct v, field by name.
func toSpec(t *testing.T, v reflect.Value, m protoreflect.Message) {
	t.Helper()
	for i := range v.NumField() {
		f, fv := v.Type().Field(i), v.Field(i)
		fd := specField(t, m.Descriptor(), f)
		checkKind(t, fd, f.Type)
		switch {
		case fd.IsList():
			l := m.Mutable(fd).List()
			for j := range fv.Len() {
				if fd.Kind() == protoreflect.MessageKind {
					e := l.NewElement()
					toSpec(t, fv.Index(j), e.Message())
					l.Append(e)
				} else {
					l.Append(scalar(fv.Index(j)))
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			toSpec(t, fv, m.Mutable(fd).Message())
		default:
			m.Set(fd, scalar(fv))
		}
	}
}

// fromSpec sets the Go struct v from m, field by name, and fails on a field set in m that v lacks.
func fromSpec(t *testing.T, m protoreflect.Message, v reflect.Value) {
	t.Helper()
	seen := map[protoreflect.Name]bool{}
	for i := range v.NumField() {
		f, fv := v.Type().Field(i), v.Field(i)
		fd := specField(t, m.Descriptor(), f)
		seen[fd.Name()] = true
		switch {
		case fd.IsList():
			l := m.Get(fd).List()
			s := reflect.MakeSlice(f.Type, l.Len(), l.Len())
			for j := range l.Len() {
				if fd.Kind() == protoreflect.MessageKind {
					fromSpec(t, l.Get(j).Message(), s.Index(j))
				} else {
					s.Index(j).Set(reflect.ValueOf(l.Get(j).Interface()))
				}
			}
			if l.Len() > 0 {
				fv.Set(s)
			}
		case fd.Kind() == protoreflect.MessageKind:
			fromSpec(t, m.Get(fd).Message(), fv)
		default:
			fv.Set(reflect.ValueOf(m.Get(fd).Interface()))
		}
	}
	m.Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if !seen[fd.Name()] {
			t.Errorf("%s is set but %v has no field for it", fd.FullName(), v.Type())
		}
		return true
	})
	if len(m.GetUnknown()) > 0 {
		t.Errorf("%s: unknown fields %x", m.Descriptor().FullName(), m.GetUnknown())
	}
}

// Every request the package sends decodes, with the generated type, to what was set in Go, and
// is what setting the same fields by name in the generated type encodes.
func TestRequestsRoundTripThroughTheSpec(t *testing.T) {
	for _, tc := range []struct {
		args any
		spec proto.Message
	}{
		{kcllib.ExecProgramArgs{}, &gpyrpc.ExecProgramArgs{}},
		{kcllib.LoadSettingsFilesArgs{}, &gpyrpc.LoadSettingsFilesArgs{}},
	} {
		typ := reflect.TypeOf(tc.args)
		t.Run(typ.Name(), func(t *testing.T) {
			for only, leaves := 0, 1; only <= leaves; only++ {
				args := reflect.New(typ)
				leaves = fill(args.Elem(), only)
				b, err := args.Interface().(interface{ Marshal() ([]byte, error) }).Marshal()
				if err != nil {
					t.Fatal(err)
				}
				got := tc.spec.ProtoReflect().New()
				if err := proto.Unmarshal(b, got.Interface()); err != nil {
					t.Fatal(err)
				}
				back := reflect.New(typ)
				fromSpec(t, got, back.Elem())
				if !reflect.DeepEqual(back.Interface(), args.Interface()) {
					t.Fatalf("round trip through %s:\n got %+v\nwant %+v", got.Descriptor().FullName(), back.Interface(), args.Interface())
				}
				byName := tc.spec.ProtoReflect().New()
				toSpec(t, args.Elem(), byName)
				if !proto.Equal(byName.Interface(), got.Interface()) {
					t.Fatalf("encoded %v, want %v", got, byName)
				}
			}
		})
	}
}

// Every result the package reads decodes to what the generated type encoded.
func TestResultsRoundTripThroughTheSpec(t *testing.T) {
	for _, tc := range []struct {
		result any
		spec   proto.Message
	}{
		{kcllib.ExecProgramResult{}, &gpyrpc.ExecProgramResult{}},
		{kcllib.LoadSettingsFilesResult{}, &gpyrpc.LoadSettingsFilesResult{}},
		{kcllib.GetVersionResult{}, &gpyrpc.GetVersionResult{}},
	} {
		typ := reflect.TypeOf(tc.result)
		t.Run(typ.Name(), func(t *testing.T) {
			for only, leaves := 0, 1; only <= leaves; only++ {
				want := reflect.New(typ)
				leaves = fill(want.Elem(), only)
				m := tc.spec.ProtoReflect().New()
				toSpec(t, want.Elem(), m)
				b, err := proto.Marshal(m.Interface())
				if err != nil {
					t.Fatal(err)
				}
				got := reflect.New(typ)
				if err := got.Interface().(interface{ Unmarshal([]byte) error }).Unmarshal(b); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got.Interface(), want.Interface()) {
					t.Fatalf("decoded\n %+v\nwant %+v", got.Interface(), want.Interface())
				}
			}
		})
	}
}

func TestZeroMessages(t *testing.T) {
	b, err := (&kcllib.ExecProgramArgs{}).Marshal()
	if err != nil || len(b) != 0 {
		t.Fatalf("empty args encode to %x, %v", b, err)
	}
	var r kcllib.LoadSettingsFilesResult
	if err := r.Unmarshal(nil); err != nil || !reflect.DeepEqual(r, kcllib.LoadSettingsFilesResult{}) {
		t.Fatalf("empty result decodes to %+v, %v", r, err)
	}
}

// ExecProgramResult is decoded without copying its strings, and otherwise as proto.Unmarshal does:
// unknown fields skipped, the last of repeated occurrences kept, bad input refused.
func TestExecProgramResultDecoding(t *testing.T) {
	b, err := proto.Marshal(&gpyrpc.ExecProgramResult{JsonResult: `{"a": 1}`, YamlResult: "a: 1", LogMessage: "log"})
	if err != nil {
		t.Fatal(err)
	}
	var r kcllib.ExecProgramResult
	if err := r.Unmarshal(b); err != nil {
		t.Fatal(err)
	}
	if p := uintptr(unsafe.Pointer(unsafe.StringData(r.YAMLResult))); p < uintptr(unsafe.Pointer(&b[0])) || p >= uintptr(unsafe.Pointer(&b[0]))+uintptr(len(b)) {
		t.Fatal("the YAML result was copied instead of sharing the answer's memory")
	}

	yaml := protowire.Number(gpyrpc.File_gpyrpc_spec_proto.Messages().ByName("ExecProgramResult").Fields().ByName("yaml_result").Number())
	odd := protowire.AppendTag(nil, 99, protowire.VarintType)
	odd = protowire.AppendVarint(odd, 7)
	odd = protowire.AppendTag(odd, yaml, protowire.BytesType)
	odd = protowire.AppendString(odd, "first")
	odd = protowire.AppendTag(odd, 98, protowire.BytesType)
	odd = protowire.AppendString(odd, "unknown")
	odd = append(odd, b...)
	odd = protowire.AppendTag(odd, yaml, protowire.BytesType)
	odd = protowire.AppendString(odd, "last")
	var want gpyrpc.ExecProgramResult
	if err := proto.Unmarshal(odd, &want); err != nil {
		t.Fatal(err)
	}
	r = kcllib.ExecProgramResult{}
	if err := r.Unmarshal(odd); err != nil {
		t.Fatal(err)
	}
	if got := (kcllib.ExecProgramResult{JSONResult: want.JsonResult, YAMLResult: want.YamlResult, LogMessage: want.LogMessage, ErrMessage: want.ErrMessage}); r != got || r.YAMLResult != "last" {
		t.Fatalf("decoded %+v, proto.Unmarshal %+v", r, got)
	}

	for name, bad := range map[string][]byte{
		"truncated":    b[:len(b)-1],
		"invalid utf8": protowire.AppendString(protowire.AppendTag(nil, yaml, protowire.BytesType), "\xff"),
		"wrong type":   protowire.AppendVarint(protowire.AppendTag(nil, yaml, protowire.Fixed32Type), 1),
	} {
		if proto.Unmarshal(bad, &gpyrpc.ExecProgramResult{}) == nil {
			t.Fatalf("%s: proto.Unmarshal accepts it, the test is wrong", name)
		}
		if err := new(kcllib.ExecProgramResult).Unmarshal(bad); err == nil {
			t.Errorf("%s: decoded without an error", name)
		}
	}
}

func TestWithoutJSONResult(t *testing.T) {
	in := &gpyrpc.ExecProgramResult{JsonResult: `{"a": 1}`, YamlResult: "a: 1", LogMessage: "log", ErrMessage: "err"}
	b, err := proto.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	unknown := protowire.AppendString(protowire.AppendTag(nil, 99, protowire.BytesType), "future field")
	out, err := kcllib.WithoutJSONResult(append(b, unknown...))
	if err != nil {
		t.Fatal(err)
	}
	var got gpyrpc.ExecProgramResult
	if err := proto.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := &gpyrpc.ExecProgramResult{YamlResult: "a: 1", LogMessage: "log", ErrMessage: "err"}
	want.ProtoReflect().SetUnknown(unknown)
	if !proto.Equal(&got, want) {
		t.Fatalf("got %v, want %v", &got, want)
	}
	if _, err := kcllib.WithoutJSONResult(b[:len(b)-1]); err == nil {
		t.Fatal("a truncated answer passed")
	}
}

// The method names the package calls are the spec's, with the messages it sends and reads.
func TestMethodsAreTheSpecs(t *testing.T) {
	for method, msgs := range map[string][2]proto.Message{
		kcllib.MethodExecProgram:       {&gpyrpc.ExecProgramArgs{}, &gpyrpc.ExecProgramResult{}},
		kcllib.MethodLoadSettingsFiles: {&gpyrpc.LoadSettingsFilesArgs{}, &gpyrpc.LoadSettingsFilesResult{}},
		kcllib.MethodGetVersion:        {&gpyrpc.GetVersionArgs{}, &gpyrpc.GetVersionResult{}},
	} {
		service, name, _ := strings.Cut(method, ".")
		sd := gpyrpc.File_gpyrpc_spec_proto.Services().ByName(protoreflect.Name(service))
		if sd == nil {
			t.Fatalf("%s: no service %s in the spec", method, service)
		}
		md := sd.Methods().ByName(protoreflect.Name(name))
		if md == nil {
			t.Fatalf("%s: no such method in the spec", method)
		}
		if md.Input() != msgs[0].ProtoReflect().Descriptor() || md.Output() != msgs[1].ProtoReflect().Descriptor() {
			t.Errorf("%s takes %s and returns %s", method, md.Input().FullName(), md.Output().FullName())
		}
	}
}
