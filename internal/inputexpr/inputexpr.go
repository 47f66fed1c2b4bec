// Package inputexpr evaluates a tenant's CEL expression, or a field path, over an object into one
// KCL argument value.
//
// The expression is written by a tenant and run inside the controller, so everything it can
// spend is bounded:
//
//   - MaxExpressionLength (4096 bytes): an expression is a selector, not a program; the bound
//     also caps how far nesting can multiply work written out in the source.
//   - CostLimit (1,000,000): the runtime cost limit of cel-go (cel.CostLimit), the same figure
//     as Kubernetes' per-expression limit for ValidatingAdmissionPolicy and CRD validation rules
//     (PerCallLimit). One unit is roughly one cheap operation (a comparison, one comprehension
//     step, a tenth of a string's bytes copied): about 300,000 comprehension steps or 10 MB of
//     strings built, whichever comes first, however the expression nests. Measured on a busy
//     two-core machine (load average 6 to 19), an expression stopped at the limit ran 0.15 to
//     2 seconds; a KCLArtifact with many expressions spends that for each. An expression whose
//     cost CEL can bound at compile time (one over literals only; the objects' sizes are not
//     known then) is refused at Compile when even its least cost is over the limit.
//   - InterruptCheckFrequency (every comprehension step): how often a running evaluation looks at
//     its context, so that a cancelled reconcile stops it. Every step, because CEL counts steps
//     across nested comprehensions and an interrupted inner one is an error value that the outer
//     all() or exists() absorbs: with a coarser frequency the outer loop can run on for long
//     after the cancel. A check is one non-blocking channel receive.
//   - MaxResultBytes (64 KiB): the largest string an expression may return; an argument is a
//     value (a tag, an address, a name), and it is stored in every history entry.
//
// The environment is CEL's standard library with optional types (object.?a.?b.orValue("")).
// The strings extension is left out on purpose: replace and format build a result whose size is
// only charged after it has been allocated, so one call could allocate far more than the cost
// limit suggests.
package inputexpr

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
)

// Var names the variable an expression reads.
const (
	Object  = "object"  // one Kubernetes object, as JSON (map[string]any) — argumentsFrom any kind
	Objects = "objects" // the rendered objects of a KCLArtifact, a list of maps — spec.exports
)

// Limits; see the package comment for why these figures.
const (
	MaxExpressionLength            = 4096
	CostLimit               uint64 = 1_000_000
	InterruptCheckFrequency        = 1
	MaxResultBytes                 = 64 << 10
)

// Program is a compiled expression. It is safe for concurrent Eval: each evaluation has its own
// cost tracker and activation.
type Program struct {
	v    string
	prog cel.Program
}

// Value is the result of an evaluation.
type Value struct {
	// Literal is the value as `kcl run -D name=<Literal>` must receive it so KCL types it as CEL
	// did: strings JSON-quoted ("1.10" stays a string, never the float 1.1), numbers and bools bare.
	Literal string
	// Text is the value as shown to people (history, events): the string itself, or the number.
	Text string
}

// envs holds one environment per variable; cel.Env is safe for concurrent use.
var envs = map[string]*cel.Env{
	Object:  mustEnv(Object, cel.MapType(cel.StringType, cel.DynType)),
	Objects: mustEnv(Objects, cel.ListType(cel.MapType(cel.StringType, cel.DynType))),
}

func mustEnv(name string, t *cel.Type) *cel.Env {
	env, err := cel.NewEnv(
		cel.Variable(name, t),
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(MaxExpressionLength),
	)
	if err != nil {
		panic(err)
	}
	return env
}

// Compile compiles expr over the one variable v (Object or Objects). Errors say what is wrong in
// words a tenant can act on (CEL's own message, position included). It refuses expressions over
// MaxExpressionLength, those whose type is known not to be a scalar, and those whose estimated
// cost exceeds CostLimit when CEL can bound it.
func Compile(expr, v string) (*Program, error) {
	env, ok := envs[v]
	if !ok {
		return nil, fmt.Errorf("unknown expression variable %q (want %q or %q)", v, Object, Objects)
	}
	if len(expr) > MaxExpressionLength {
		return nil, fmt.Errorf("the expression is %d bytes, over the limit of %d bytes", len(expr), MaxExpressionLength)
	}
	if strings.TrimSpace(expr) == "" {
		return nil, errors.New("the expression is empty")
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("the expression does not compile: %s", strings.ReplaceAll(iss.Err().Error(), "<input>:", "expression:"))
	}
	if kind, ok := nonScalarType(ast.OutputType()); ok {
		return nil, notScalar(kind)
	}
	if err := checkEstimate(env, ast); err != nil {
		return nil, err
	}
	prog, err := env.Program(ast,
		cel.CostLimit(CostLimit),
		cel.InterruptCheckFrequency(InterruptCheckFrequency),
	)
	if err != nil {
		return nil, fmt.Errorf("the expression cannot be prepared: %w", err)
	}
	return &Program{v: v, prog: prog}, nil
}

// checkEstimate refuses an expression whose least estimated cost is over the limit: one that can
// only fail. The variable's sizes are not known at compile time (CEL takes them as 0 to
// unbounded), so this refuses what is expensive over literals; the runtime limit guards the rest.
func checkEstimate(env *cel.Env, ast *cel.Ast) error {
	est, err := env.EstimateCost(ast, noSizes{})
	if err != nil {
		return fmt.Errorf("the expression's cost cannot be estimated: %w", err)
	}
	if est.Min > CostLimit {
		return fmt.Errorf("the expression's estimated cost is at least %d, over the limit of %d", est.Min, CostLimit)
	}
	return nil
}

// noSizes leaves every size and call cost to CEL's defaults: unknown for the variable.
type noSizes struct{}

func (noSizes) EstimateSize(checker.AstNode) *checker.SizeEstimate { return nil }

func (noSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// nonScalarType names a type known at compile time that can never be an argument.
func nonScalarType(t *cel.Type) (string, bool) {
	switch t.Kind() {
	case types.ListKind:
		return "a list", true
	case types.MapKind:
		return "a map", true
	case types.BytesKind:
		return "bytes", true
	case types.NullTypeKind:
		return "null", true
	case types.TimestampKind:
		return "a timestamp", true
	case types.DurationKind:
		return "a duration", true
	case types.TypeKind:
		return "a type", true
	case types.OpaqueKind:
		if t.TypeName() == "optional_type" {
			return "an optional value (end it with .orValue(...))", true
		}
	}
	return "", false
}

func notScalar(kind string) error {
	return fmt.Errorf("the expression returned %s; an argument must be a string, number or bool", kind)
}

// Eval evaluates over value (map[string]any for Object, []any or []map[string]any for Objects),
// within CostLimit and ctx. The result must be a string, int, uint, double or bool.
func (p *Program) Eval(ctx context.Context, value any) (Value, error) {
	if ctx == nil {
		return Value{}, errors.New("inputexpr: nil context")
	}
	if err := ctx.Err(); err != nil {
		return Value{}, fmt.Errorf("the expression was not evaluated: %w", err)
	}
	out, _, err := p.prog.ContextEval(ctx, map[string]any{p.v: value})
	if err != nil {
		return Value{}, evalError(ctx, err)
	}
	return convert(out)
}

// evalError words an evaluation error: the cost limit and cancellation apart from the
// expression's own errors (CEL's message names a missing key: "no such key: clusterIP").
func evalError(ctx context.Context, err error) error {
	var cancelled interpreter.EvalCancelledError
	if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded ||
		strings.Contains(err.Error(), "cost limit exceeded") {
		return fmt.Errorf("the expression was stopped: its cost exceeded the limit of %d", CostLimit)
	}
	// An interrupted comprehension yields CEL's "operation interrupted" error value.
	if ctx.Err() != nil {
		return fmt.Errorf("the expression was stopped: %w", ctx.Err())
	}
	return fmt.Errorf("the expression failed: %s", err.Error())
}

// convert turns a scalar result into a Value, refusing everything else.
func convert(out ref.Val) (Value, error) {
	switch v := out.(type) {
	case types.String:
		return stringValue(string(v))
	case types.Bool:
		s := strconv.FormatBool(bool(v))
		return Value{Literal: s, Text: s}, nil
	case types.Int:
		s := strconv.FormatInt(int64(v), 10)
		return Value{Literal: s, Text: s}, nil
	case types.Uint:
		// KCL's integers are 64-bit signed: a larger -D value becomes a float there.
		if uint64(v) > math.MaxInt64 {
			return Value{}, fmt.Errorf("the expression returned %d, over KCL's largest integer %d", uint64(v), int64(math.MaxInt64))
		}
		s := strconv.FormatUint(uint64(v), 10)
		return Value{Literal: s, Text: s}, nil
	case types.Double:
		return doubleValue(float64(v))
	}
	return Value{}, notScalar(kindOf(out))
}

func stringValue(s string) (Value, error) {
	if len(s) > MaxResultBytes {
		return Value{}, fmt.Errorf("the expression returned a string of %d bytes, over the limit of %d bytes", len(s), MaxResultBytes)
	}
	if !utf8.ValidString(s) {
		return Value{}, errors.New("the expression returned a string that is not valid UTF-8")
	}
	return Value{Literal: Quote(s), Text: s}, nil
}

// Quote is s as a KCL argument that stays a string whatever it looks like: a JSON string literal
// ("1.10" stays a string, never the float 1.1).
func Quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // KCL reads \u003c too, but people read the literal in errors
	_ = enc.Encode(s)        // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// doubleValue keeps a float a float in KCL: 2.0 must not be written 2 (an int there).
func doubleValue(f float64) (Value, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return Value{}, fmt.Errorf("the expression returned %v; KCL has no such number", f)
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".e") {
		s += ".0"
	}
	return Value{Literal: s, Text: s}, nil
}

// kindOf names a non-scalar result for the error message.
func kindOf(v ref.Val) string {
	switch v.Type() {
	case types.NullType:
		return "null"
	case types.ListType:
		return "a list"
	case types.MapType:
		return "a map"
	case types.BytesType:
		return "bytes"
	case types.TimestampType:
		return "a timestamp"
	case types.DurationType:
		return "a duration"
	case types.TypeType:
		return "a type"
	case types.OptionalType:
		return "an optional value (end it with .orValue(...))"
	}
	return "a value of type " + v.Type().TypeName()
}
