package inputexpr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
)

// Condition is a compiled condition: a tenant's CEL expression that decides pass or fail (a
// release check's `value < 0.05` over a Prometheus result). It runs in the same environment and
// under the same bounds as argument expressions (the package comment): MaxExpressionLength,
// CostLimit with the same cost estimator, the time budget, the size bounds of what it reads. It
// is safe for concurrent Eval.
type Condition struct {
	prog cel.Program
}

// conditionBase is the environment of conditions before their variables are declared.
var conditionBase = func() *cel.Env {
	env, err := cel.NewCustomEnv(envOptions()...)
	if err != nil {
		panic(err)
	}
	return env
}()

// CompileCondition compiles expr over the variables vars (name → CEL type, cel.DynType when it
// varies). It refuses, in words a tenant can act on, expressions over MaxExpressionLength, those
// that do not compile, those whose type is known not to be bool (`value + 1`, `"x"`), and those
// whose estimated cost is over CostLimit when CEL can bound it (one over literals).
func CompileCondition(expr string, vars map[string]*cel.Type) (*Condition, error) {
	if len(expr) > MaxExpressionLength {
		return nil, fmt.Errorf("the condition is %d bytes, over the limit of %d bytes", len(expr), MaxExpressionLength)
	}
	if strings.TrimSpace(expr) == "" {
		return nil, errors.New("the condition is empty")
	}
	names := make([]string, 0, len(vars))
	for n := range vars {
		names = append(names, n)
	}
	slices.Sort(names)
	opts := make([]cel.EnvOption, 0, len(names))
	for _, n := range names {
		opts = append(opts, cel.Variable(n, vars[n]))
	}
	env, err := conditionBase.Extend(opts...)
	if err != nil {
		return nil, fmt.Errorf("inputexpr: condition variables: %w", err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("the condition does not compile: %s", strings.ReplaceAll(iss.Err().Error(), "<input>:", "condition:"))
	}
	switch t := ast.OutputType(); t.Kind() {
	case types.BoolKind, types.DynKind, types.AnyKind:
	default:
		return nil, fmt.Errorf("the condition returns %s, not a bool: write a comparison, such as value < 0.05", typeName(t))
	}
	if err := checkEstimate(env, ast); err != nil {
		return nil, errors.New(strings.Replace(err.Error(), "the expression's", "the condition's", 1))
	}
	prog, err := env.Program(ast,
		cel.CostLimit(CostLimit),
		cel.CostTracking(estimator),
		cel.InterruptCheckFrequency(InterruptCheckFrequency),
	)
	if err != nil {
		return nil, fmt.Errorf("the condition cannot be prepared: %w", err)
	}
	return &Condition{prog: prog}, nil
}

// typeName names a CEL type for a tenant: "a double", "a string", "a list".
func typeName(t *cel.Type) string {
	if k, ok := nonScalarType(t); ok {
		return k
	}
	switch t.Kind() {
	case types.DoubleKind:
		return "a double"
	case types.IntKind:
		return "an int"
	case types.UintKind:
		return "a uint"
	case types.StringKind:
		return "a string"
	}
	return "a value of type " + t.String()
}

// Eval evaluates the condition over activation (variable name → value, as Go values: JSON-like
// maps and lists, numbers, strings; a cel-go ref.Val is taken as is, so an error value stands for
// a variable that cannot be read, failing only conditions that use it) within CostLimit, the
// size bounds, ctx and DefaultTimeBudget. A result that is not a bool is an error. An evaluation
// stopped by a bound returns a *LimitError; another failure of the expression wraps CEL's error
// (and an error value it read: errors.Is finds it).
func (c *Condition) Eval(ctx context.Context, activation map[string]any) (bool, error) {
	if ctx == nil {
		return false, errors.New("inputexpr: nil context")
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("the condition was not evaluated: %w", err)
	}
	budget := DefaultTimeBudget
	bctx, cancel := context.WithTimeoutCause(ctx, budget, errBudget)
	defer cancel()
	vars := make(map[string]any, len(activation))
	for k, v := range activation {
		vars[k] = topLevel(v)
	}
	out, _, err := c.prog.ContextEval(bctx, vars)
	if err != nil {
		e := evalError(ctx, bctx, budget, err)
		var le *LimitError
		if errors.As(e, &le) || ctx.Err() != nil {
			return false, e
		}
		return false, fmt.Errorf("the condition failed: %w", err)
	}
	if o, ok := oversizedResult(out); ok {
		return false, sizeError("it read " + o.what)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("the condition returned %s, not a bool", resultKind(out))
	}
	return bool(b), nil
}

// resultKind names a non-bool result of a condition.
func resultKind(v ref.Val) string {
	switch v.(type) {
	case types.Double:
		return "a double"
	case types.Int:
		return "an int"
	case types.Uint:
		return "a uint"
	case types.String:
		return "a string"
	}
	return kindOf(v)
}
