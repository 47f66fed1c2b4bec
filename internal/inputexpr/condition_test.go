package inputexpr

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
)

var conditionVars = map[string]*cel.Type{
	"value":  cel.DoubleType,
	"result": cel.ListType(cel.MapType(cel.StringType, cel.DynType)),
}

func TestConditionEval(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		expr string
		act  map[string]any
		want bool
	}{
		{"value < 0.05", map[string]any{"value": 0.01}, true},
		{"value < 0.05", map[string]any{"value": 0.5}, false},
		{"result.all(s, s.value < 1.0)", map[string]any{"result": []any{map[string]any{"value": 0.5}, map[string]any{"value": 0.2}}}, true},
		{"result.exists(s, s.labels.code == '500')", map[string]any{"result": []any{map[string]any{"labels": map[string]any{"code": "200"}, "value": 1.0}}}, false},
	} {
		c, err := CompileCondition(tc.expr, conditionVars)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		got, err := c.Eval(ctx, tc.act)
		if err != nil || got != tc.want {
			t.Errorf("%s over %v = %v, %v; want %v", tc.expr, tc.act, got, err, tc.want)
		}
	}
}

func TestConditionRefused(t *testing.T) {
	ten := "[0,1,2,3,4,5,6,7,8,9]"
	lit := `"` + strings.Repeat("1", 3000) + `"`
	for expr, want := range map[string]string{
		"value + 1":   "found no matching overload for '_+_' applied to '(double, int)'",
		"value + 1.0": "the condition returns a double, not a bool",
		`"x"`:         "the condition returns a string, not a bool",
		"result":      "the condition returns a list, not a bool",
		"value <":     "the condition does not compile",
		"nope > 1.0":  "undeclared reference to 'nope'",
		"  ":          "the condition is empty",
		strings.Repeat("1 < 2 && ", 600) + "true": "over the limit of 4096 bytes",
		ten + ".map(a, " + ten + ".map(b, " + ten + ".map(c, " + ten + ".map(d, double(" + lit + ")))))[0][0][0][0] > 1.0": "the condition's estimated cost is at least",
	} {
		_, err := CompileCondition(expr, conditionVars)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CompileCondition(%.60s) = %v; want an error with %q", expr, err, want)
		}
	}
}

func TestConditionRuntimeErrors(t *testing.T) {
	ctx := context.Background()
	// a dyn result that is not a bool
	c, err := CompileCondition("result[0].value", conditionVars)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Eval(ctx, map[string]any{"result": []any{map[string]any{"value": "x"}}}); err == nil ||
		!strings.Contains(err.Error(), "returned a string, not a bool") {
		t.Errorf("non-bool at runtime: %v", err)
	}
	// an error value for a variable fails the conditions that use it, and errors.Is finds it
	missing := errors.New("the query returned no sample")
	c, err = CompileCondition("value < 0.05", conditionVars)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Eval(ctx, map[string]any{"value": types.WrapErr(missing), "result": []any{}}); !errors.Is(err, missing) {
		t.Errorf("reading an error value: %v; want it wrapped", err)
	}
	c, err = CompileCondition("size(result) == 0 || value < 0.05", conditionVars)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Eval(ctx, map[string]any{"value": types.WrapErr(missing), "result": []any{}}); err != nil || !ok {
		t.Errorf("a condition that does not need the error value: %v, %v", ok, err)
	}
	// the cost limit at runtime
	c, err = CompileCondition("result.all(a, result.all(b, result.all(c, a.value <= b.value + c.value)))", conditionVars)
	if err != nil {
		t.Fatal(err)
	}
	big := make([]any, 1000)
	for i := range big {
		big[i] = map[string]any{"value": 1.0}
	}
	// whichever bound comes first on this machine: the cost limit or the time budget
	var le *LimitError
	if _, err := c.Eval(ctx, map[string]any{"result": big}); !errors.As(err, &le) {
		t.Errorf("a billion steps: %v; want a bound", err)
	}
}
