package inputexpr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/traits"
)

// manyObjects returns n small rendered objects, as a KCLArtifact's export reads them.
func manyObjects(n int) []any {
	objs := make([]any, n)
	for i := range objs {
		objs[i] = map[string]any{
			"kind":     "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%d", i)},
			"data":     map[string]any{"k": strings.Repeat("x", 64)},
		}
	}
	return objs
}

const costError = "the expression was stopped: it exceeded its cost limit of 1000000"

// noBudget is a time budget the tests of the cost limit never reach: they test it alone.
const noBudget = time.Hour

// TestAttackSlowExpressionStopsAtCostLimit: expressions whose work grows as a power of the input
// (8e9 comprehension steps over 2,000 objects) or whose strings grow stop at the cost limit,
// with the cost error, not a timeout (the time budget is left out: it stops them sooner).
func TestAttackSlowExpressionStopsAtCostLimit(t *testing.T) {
	objs := manyObjects(2000)
	for name, expr := range map[string]string{
		"nested all":    `objects.all(a, objects.all(b, objects.all(c, true)))`,
		"nested map":    `size(objects.map(a, objects.map(b, objects.map(c, c.kind)))) > 0`,
		"nested exists": `objects.exists(a, objects.exists(b, a.metadata.name == b.metadata.name + "-never"))`,
		"string growth": `objects.map(a, objects.map(b, a.data.k + b.data.k + a.data.k + b.data.k))[0][0]`,
		"filter chain":  `objects.filter(a, objects.filter(b, b.kind == a.kind).size() > 0).size() > 0 ? "x" : "y"`,
	} {
		t.Run(name, func(t *testing.T) {
			p, err := Compile(expr, Objects)
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			start := time.Now()
			v, err := p.EvalWithin(context.Background(), objs, noBudget)
			t.Logf("stopped after %v", time.Since(start)) // a figure for the record, not asserted
			if err == nil || err.Error() != costError || !errors.Is(err, ErrCostLimit) {
				t.Fatalf("Eval = %+v, %v; want the cost error %q", v, err, costError)
			}
		})
	}
}

// TestAttackBoundedExpensiveExpressionRefusedAtCompile: over literals CEL bounds the cost, and
// an expression that must cost more than the limit (8e6 steps of map()) is refused before it
// runs; one that may stop early (all()) is left to the runtime limit.
func TestAttackBoundedExpensiveExpressionRefusedAtCompile(t *testing.T) {
	list := "[" + strings.TrimSuffix(strings.Repeat("1,", 200), ",") + "]"
	expr := fmt.Sprintf("%s.map(a, %s.map(b, %s.map(c, 1)))[0][0][0]", list, list, list)
	_, err := Compile(expr, Object)
	if err == nil || !strings.Contains(err.Error(), "estimated cost is at least") || !strings.Contains(err.Error(), "over the limit of 1000000") {
		t.Fatalf("Compile = %v; want the estimated cost refused", err)
	}
	p, err := Compile(fmt.Sprintf("%s.all(a, %s.all(b, %s.all(c, true)))", list, list, list), Object)
	if err != nil {
		t.Fatalf("Compile(all): %v", err)
	}
	if _, err := p.EvalWithin(context.Background(), map[string]any{}, noBudget); err == nil || err.Error() != costError {
		t.Fatalf("Eval(all) = %v; want the cost error", err)
	}
}

// TestAttackHugeResultRefused: a string result over 64 KiB is an error, read or built.
func TestAttackHugeResultRefused(t *testing.T) {
	obj := map[string]any{"big": strings.Repeat("a", 40<<10)}
	for _, expr := range []string{`object.big + object.big`, `object.big + object.big + object.big`} {
		p, err := Compile(expr, Object)
		if err != nil {
			t.Fatalf("Compile(%s): %v", expr, err)
		}
		_, err = p.Eval(context.Background(), obj)
		if err == nil || !strings.Contains(err.Error(), "over the limit of 65536 bytes") {
			t.Fatalf("Eval(%s) = %v; want the result size refused", expr, err)
		}
	}
	// Exactly the limit is accepted.
	p, _ := Compile(`object.big`, Object)
	if _, err := p.Eval(context.Background(), map[string]any{"big": strings.Repeat("a", MaxResultBytes)}); err != nil {
		t.Fatalf("a %d-byte string: %v", MaxResultBytes, err)
	}
}

// TestAttackLongExpressionRefused: an expression over MaxExpressionLength is refused before parsing.
func TestAttackLongExpressionRefused(t *testing.T) {
	expr := `object.a == "` + strings.Repeat("x", MaxExpressionLength) + `"`
	if _, err := Compile(expr, Object); err == nil || !strings.Contains(err.Error(), "over the limit of 4096 bytes") {
		t.Fatalf("Compile = %v; want the length refused", err)
	}
	if _, err := FieldPath("." + strings.Repeat("a", MaxExpressionLength)); err == nil || !strings.Contains(err.Error(), "over the limit of 4096 bytes") {
		t.Fatalf("FieldPath = %v; want the length refused", err)
	}
}

// TestAttackDeepNestingRefused: deep nesting within the length limit is refused by the parser,
// not a stack overflow.
func TestAttackDeepNestingRefused(t *testing.T) {
	expr := strings.Repeat("(", 1000) + "1" + strings.Repeat(")", 1000)
	_, err := Compile(expr, Object)
	if err == nil || !strings.Contains(err.Error(), "does not compile") {
		t.Fatalf("Compile = %v; want a parse error", err)
	}
}

// TestAttackCancelledContextStopsEvaluation: a cancelled reconcile stops a running evaluation
// (checked every InterruptCheckFrequency comprehension steps) with the context's error.
func TestAttackCancelledContextStopsEvaluation(t *testing.T) {
	p, err := Compile(`objects.all(a, objects.all(b, true))`, Objects)
	if err != nil {
		t.Fatal(err)
	}
	objs := manyObjects(2000)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = p.Eval(ctx, objs)
	if err == nil || !strings.Contains(err.Error(), "not evaluated") || !errors.Is(err, context.Canceled) {
		t.Fatalf("Eval = %v; want it refused for the cancelled context", err)
	}
	// Cancelled while it runs: the context is cancelled when the evaluation first reads objects.
	// The outer all() must stop at its next step, not run on over the inner all()'s interrupted
	// error (which all() absorbs): objects is iterated once by the outer loop and once by the
	// first inner loop, not 2,000 times.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	list := &cancelOnFirstRead{Lister: types.NewDynamicList(types.DefaultTypeAdapter, objs), cancel: cancel}
	_, err = p.Eval(ctx, list)
	if err == nil || !strings.Contains(err.Error(), "stopped") || !errors.Is(err, context.Canceled) {
		t.Fatalf("Eval = %v; want it stopped by the cancelled context", err)
	}
	if list.reads > 2 {
		t.Fatalf("objects iterated %d times after the cancel; want the evaluation stopped at once", list.reads)
	}
}

// TestAttackNoHostAccess: the environment has no functions reaching outside the object (no
// variables but the one declared, no extension libraries).
func TestAttackNoHostAccess(t *testing.T) {
	for _, expr := range []string{
		`objects[0].kind`,          // the other variable
		`env("HOME")`,              // no such function
		`"a".replace("a", "aaaa")`, // the strings extension is left out (see package comment)
		`request.auth.principal`,   // Kubernetes' variables are not there
	} {
		if _, err := Compile(expr, Object); err == nil || !strings.Contains(err.Error(), "does not compile") {
			t.Errorf("Compile(%s) = %v; want it refused", expr, err)
		}
	}
}

// cancelOnFirstRead is a list that cancels its context when the evaluation starts iterating it.
type cancelOnFirstRead struct {
	traits.Lister
	cancel func()
	reads  int
}

func (c *cancelOnFirstRead) Iterator() traits.Iterator {
	c.reads++
	c.cancel()
	return c.Lister.Iterator()
}
