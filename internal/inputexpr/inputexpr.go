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
//     step, a tenth of a string's bytes copied, parsed or compared): about 300,000 comprehension
//     steps or 10 MB of strings built, converted or compared, whichever comes first, however
//     the expression nests. cel-go charges a conversion (double(), int(), ...) one unit whatever
//     its input; here it is charged by its input's size, as are size() of a string, equality of
//     lists and maps (by what comparing walks) and matches() (by the input's length times the
//     compiled pattern's size): cost.go. An expression whose cost CEL can bound at compile time
//     (one over literals only; the objects' sizes are not known then) is refused at Compile when
//     even its least cost is over the limit.
//   - MaxStringBytes (64 KiB) and MaxListLength (10,000): the largest string, list or map of the
//     object an expression may use; one that uses a larger one is stopped (LimitError,
//     ErrSizeLimit). Reading the object's name is not refused for a large annotation elsewhere.
//   - a time budget (DefaultTimeBudget, 100 ms; the controller's --expression-time-budget): the
//     wall-clock time one evaluation may take, whatever the reconcile's deadline; past it the
//     evaluation stops at its next comprehension step (ErrTimeBudget). The cost limit makes the
//     work deterministic; the budget bounds what a busy machine makes of it.
//   - InterruptCheckFrequency (every comprehension step): how often a running evaluation looks at
//     its context (the reconcile's, within the time budget). Every step, because CEL counts steps
//     across nested comprehensions and an interrupted inner one is an error value that the outer
//     all() or exists() absorbs: with a coarser frequency the outer loop can run on for long
//     after the cancel. A check is one non-blocking channel receive.
//   - MaxResultBytes (64 KiB): the largest string an expression may return; an argument is a
//     value (a tag, an address, a name), and it is stored in every history entry.
//
// The environment is CEL's standard library with optional types (object.?a.?b.orValue("")),
// matches() guarded (a match whose charge alone is over the limit is refused before it runs). The
// strings extension is left out on purpose: replace and format build a result whose size is
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
	"time"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	celenv "github.com/google/cel-go/common/env"
	"github.com/google/cel-go/common/overloads"
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
	// DefaultTimeBudget is the wall-clock time one evaluation may take unless the caller says.
	DefaultTimeBudget = 100 * time.Millisecond
)

// Kinds of LimitError, for errors.Is.
var (
	ErrCostLimit  = errors.New("cost limit exceeded")
	ErrTimeBudget = errors.New("time budget exceeded")
	ErrSizeLimit  = errors.New("size limit exceeded")
)

// LimitError is an evaluation stopped by a bound: errors.Is(err, ErrCostLimit) (or
// ErrTimeBudget, ErrSizeLimit) tells which.
type LimitError struct {
	Kind error
	msg  string
}

func (e *LimitError) Error() string        { return e.msg }
func (e *LimitError) Is(target error) bool { return target == e.Kind }

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
	env, err := cel.NewCustomEnv(append(envOptions(), cel.Variable(name, t))...)
	if err != nil {
		panic(err)
	}
	return env
}

// envOptions are the environment of every expression, without its variables: the one of
// argumentsFrom and exports, and of conditions (condition.go).
func envOptions() []cel.EnvOption {
	return []cel.EnvOption{
		// the standard library with matches() replaced by one refused before it runs when its
		// charge alone is over the limit (cost.go)
		cel.StdLib(cel.StdLibSubset(celenv.NewLibrarySubset().AddExcludedFunctions(&celenv.Function{Name: overloads.Matches}))),
		cel.Function(overloads.Matches,
			cel.Overload(overloads.Matches, []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType),
			cel.MemberOverload(overloads.MatchesString, []*cel.Type{cel.StringType, cel.StringType}, cel.BoolType),
			cel.SingletonBinaryBinding(matchGuarded)),
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(MaxExpressionLength),
	}
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
		cel.CostTracking(estimator),
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
	est, err := env.EstimateCost(ast, estimator)
	if err != nil {
		return fmt.Errorf("the expression's cost cannot be estimated: %w", err)
	}
	if est.Min > CostLimit {
		return fmt.Errorf("the expression's estimated cost is at least %d, over the limit of %d", est.Min, CostLimit)
	}
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

// Eval evaluates over value within CostLimit, ctx and DefaultTimeBudget; see EvalWithin.
func (p *Program) Eval(ctx context.Context, value any) (Value, error) {
	return p.EvalWithin(ctx, value, DefaultTimeBudget)
}

// EvalWithin evaluates over value (map[string]any for Object, []any or []map[string]any for
// Objects), within CostLimit, the size bounds, ctx and budget of wall-clock time (DefaultTimeBudget
// when not positive). The result must be a string, int, uint, double or bool. An evaluation
// stopped by a bound returns a *LimitError.
func (p *Program) EvalWithin(ctx context.Context, value any, budget time.Duration) (Value, error) {
	if ctx == nil {
		return Value{}, errors.New("inputexpr: nil context")
	}
	if err := ctx.Err(); err != nil {
		return Value{}, fmt.Errorf("the expression was not evaluated: %w", err)
	}
	if budget <= 0 {
		budget = DefaultTimeBudget
	}
	bctx, cancel := context.WithTimeoutCause(ctx, budget, errBudget)
	defer cancel()
	out, _, err := p.prog.ContextEval(bctx, map[string]any{p.v: topLevel(value)})
	if err != nil {
		return Value{}, evalError(ctx, bctx, budget, err)
	}
	if o, ok := oversizedResult(out); ok {
		return Value{}, sizeError("it read " + o.what)
	}
	return convert(out)
}

// errBudget is the cause of an evaluation's context ending at its time budget.
var errBudget = errors.New("the expression's time budget ended")

// evalError words an evaluation error: the bounds and cancellation apart from the expression's
// own errors (CEL's message names a missing key: "no such key: clusterIP"). ctx is the caller's,
// bctx the evaluation's (ctx within the time budget).
func evalError(ctx, bctx context.Context, budget time.Duration, err error) error {
	var cancelled interpreter.EvalCancelledError
	if errors.As(err, &cancelled) {
		switch cancelled.Cause {
		case interpreter.CostLimitExceeded:
			msg := fmt.Sprintf("the expression was stopped: it exceeded its cost limit of %d", CostLimit)
			if !strings.Contains(cancelled.Message, "cost limit exceeded") {
				msg += " (" + cancelled.Message + ")" // the guard of matches() says which match
			}
			return &LimitError{Kind: ErrCostLimit, msg: msg}
		case sizeLimitCause:
			return sizeError(cancelled.Message)
		}
	}
	// An interrupted comprehension yields CEL's "operation interrupted" error value.
	if ctx.Err() != nil {
		return fmt.Errorf("the expression was stopped: %w", ctx.Err())
	}
	if context.Cause(bctx) == errBudget {
		return &LimitError{Kind: ErrTimeBudget, msg: fmt.Sprintf("the expression was stopped: it exceeded its time budget of %v", budget)}
	}
	return fmt.Errorf("the expression failed: %s", err.Error())
}

func sizeError(read string) error {
	return &LimitError{Kind: ErrSizeLimit, msg: "the expression was stopped: " + read}
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
