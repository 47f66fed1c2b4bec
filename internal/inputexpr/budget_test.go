package inputexpr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bombService is a Service with an annotation of n bytes, as a tenant may create one.
func bombService(n int) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "bomb", "annotations": map[string]any{"z": strings.Repeat("1", n)}},
	}
}

// thousand is a list literal of a thousand zeros.
var thousand = "[" + strings.TrimSuffix(strings.Repeat("0,", 1000), ",") + "]"

// conversionBomb (issue 54) converts the annotation a million times: cel-go's default runtime
// cost charges a conversion one unit whatever its input's size, so over a 250 KB annotation it
// ran until the reconcile's deadline (2m20s in this package's test before the fix, when the cost
// limit stopped it after some 166,000 conversions).
var conversionBomb = thousand + ".all(i, " + thousand + ".all(j, double(object.metadata.annotations.z) > 0.0))"

// underCap is an annotation just under MaxStringBytes: the expression may read it, and each
// conversion of it is charged 6,001 units.
const underCap = 60_000

// evalBounded evaluates within wait at most: past it, the evaluation is cancelled and the test
// fails, so a runaway expression fails the test rather than holding it.
func evalBounded(t *testing.T, p *Program, value any, budget, wait time.Duration) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := p.EvalWithin(ctx, value, budget)
		done <- err
	}()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(wait):
		cancel()
		<-done
		t.Fatalf("the expression was still running after %v", wait)
	}
	return 0, nil
}

func compileBomb(t *testing.T) *Program {
	t.Helper()
	if len(conversionBomb) > MaxExpressionLength {
		t.Fatalf("the bomb is %d bytes", len(conversionBomb))
	}
	p, err := Compile(conversionBomb, Object)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wantLimit(t *testing.T, err error, kind error, msg string) {
	t.Helper()
	var le *LimitError
	if err == nil || !errors.As(err, &le) || !errors.Is(err, kind) || err.Error() != msg {
		t.Fatalf("Eval = %v; want a %v: %q", err, kind, msg)
	}
}

// TestAttackConversionBombStopsAtCostLimit: under the size cap, the bomb stops at the cost limit
// after 166 conversions, each charged by its input's size. The time budget is left out: without
// the size charge, the cost limit would come after some 166,000 conversions, minutes later, and
// the test fails at its bounded wait.
func TestAttackConversionBombStopsAtCostLimit(t *testing.T) {
	took, err := evalBounded(t, compileBomb(t), bombService(underCap), noBudget, 20*time.Second)
	t.Logf("stopped after %v: %v", took, err)
	wantLimit(t, err, ErrCostLimit, "the expression was stopped: it exceeded its cost limit of 1000000")
	if took > 2*time.Second {
		t.Fatalf("stopped after %v; want it stopped after 166 conversions", took)
	}
}

// TestAttackConversionBombStopsAtTimeBudget: the time budget stops the bomb on its own, well
// before the cost limit would (a budget of 1ms against some 166 conversions of 60 KB): without
// the budget, the error is the cost limit's and the test fails.
func TestAttackConversionBombStopsAtTimeBudget(t *testing.T) {
	took, err := evalBounded(t, compileBomb(t), bombService(underCap), time.Millisecond, 20*time.Second)
	t.Logf("stopped after %v: %v", took, err)
	wantLimit(t, err, ErrTimeBudget, "the expression was stopped: it exceeded its time budget of 1ms")
	if took > time.Second {
		t.Fatalf("stopped after %v; want it stopped at the budget's next comprehension step", took)
	}
}

// TestAttackConversionBombDefaults: as the controller runs it (the default budget of 100ms), the
// bomb stops within the budget, by whichever bound comes first on this machine.
func TestAttackConversionBombDefaults(t *testing.T) {
	took, err := evalBounded(t, compileBomb(t), bombService(underCap), DefaultTimeBudget, 20*time.Second)
	t.Logf("stopped after %v: %v", took, err)
	if !errors.Is(err, ErrCostLimit) && !errors.Is(err, ErrTimeBudget) {
		t.Fatalf("Eval = %v; want the cost limit or the time budget", err)
	}
	// one conversion over the budget at most; a loaded CI machine may deschedule the goroutine
	if took > DefaultTimeBudget+time.Second {
		t.Fatalf("stopped after %v; want about %v", took, DefaultTimeBudget)
	}
}

// TestAttackConversionBombOverTheSizeCap: the issue's own bomb, a 250 KB annotation, is refused
// at the first use of the annotation, before any conversion.
func TestAttackConversionBombOverTheSizeCap(t *testing.T) {
	took, err := evalBounded(t, compileBomb(t), bombService(250_000), noBudget, 20*time.Second)
	t.Logf("stopped after %v: %v", took, err)
	wantLimit(t, err, ErrSizeLimit, "the expression was stopped: it read a string of 250000 bytes, over the limit of 65536 bytes")
}

// TestSizeCapOnlyWhatIsUsed: a value over the caps fails an expression that uses it (a function,
// an operator, the result), not one that reads the rest of the object or tests its presence.
func TestSizeCapOnlyWhatIsUsed(t *testing.T) {
	obj := bombService(MaxStringBytes + 1)
	obj["spec"] = map[string]any{
		"items": make([]any, MaxListLength+1),
		"small": []any{"a", strings.Repeat("b", MaxStringBytes)},
		"map": func() map[string]any {
			m := map[string]any{}
			for i := range MaxListLength + 1 {
				m[fmt.Sprint(i)] = ""
			}
			return m
		}(),
	}
	for _, tc := range []struct{ expr, want string }{
		{`object.metadata.name`, `"bomb"`},
		{`has(object.metadata.annotations.z)`, `true`},
		{`"z" in object.metadata.annotations`, `true`},
		{`object.?metadata.?annotations.?y.orValue("none")`, `"none"`},
		{`has(object.spec.items) && has(object.spec.map)`, `true`},
		{`size(object.spec.small[1])`, fmt.Sprint(MaxStringBytes)}, // exactly the cap is read
	} {
		got, err := eval(t, tc.expr, Object, obj)
		if err != nil || got.Literal != tc.want {
			t.Errorf("%s = %+v, %v; want %s", tc.expr, got, err, tc.want)
		}
	}
	str := "the expression was stopped: it read a string of 65537 bytes, over the limit of 65536 bytes"
	list := "the expression was stopped: it read a list of 10001 items, over the limit of 10000 items"
	for _, tc := range []struct{ expr, want string }{
		{`object.metadata.annotations.z`, str},
		{`size(object.metadata.annotations.z)`, str},
		{`object.metadata.annotations.z == "" || true`, str},
		{`object.metadata.annotations.exists(k, object.metadata.annotations[k].startsWith("1"))`, str},
		{`object.?metadata.?annotations.?z.orValue("")`, str},
		{`size(object.spec.items)`, list},
		{`object.spec.items.exists(i, true)`, list},
		{`size(object.spec.map)`, "the expression was stopped: it read a map of 10001 entries, over the limit of 10000 entries"},
	} {
		p, err := Compile(tc.expr, Object)
		if err != nil {
			t.Fatalf("Compile(%s): %v", tc.expr, err)
		}
		_, err = p.EvalWithin(context.Background(), obj, noBudget)
		if err == nil || err.Error() != tc.want || !errors.Is(err, ErrSizeLimit) {
			t.Errorf("%s: %v; want %q", tc.expr, err, tc.want)
		}
	}
	// the list of a render's objects is bounded by --kcl-max-objects, not by the cap
	got, err := eval(t, `size(objects)`, Objects, manyObjects(MaxListLength+1))
	if err != nil || got.Literal != fmt.Sprint(MaxListLength+1) {
		t.Errorf("size(objects) = %+v, %v", got, err)
	}
}

// TestAttackRegexChargedByCompiledSize: a short pattern with counted repetitions compiles to
// thousands of instructions, and one match over a string at the cap took 13s (measured; Go's
// regexp cannot be interrupted). Charged by the compiled pattern's size, the match is refused
// before it runs.
func TestAttackRegexChargedByCompiledSize(t *testing.T) {
	pattern := strings.Repeat(`a{1000}`, 10) + "b" // 71 bytes, 10,003 instructions
	p, err := Compile(`object.s.matches("`+pattern+`")`, Object)
	if err != nil {
		t.Fatal(err)
	}
	took, err := evalBounded(t, p, map[string]any{"s": strings.Repeat("a", MaxStringBytes)}, noBudget, 20*time.Second)
	t.Logf("stopped after %v: %v", took, err)
	wantLimit(t, err, ErrCostLimit, "the expression was stopped: it exceeded its cost limit of 1000000 "+
		"(a match of a 65536-byte string against a pattern of 10003 instructions would cost 131119324)")
	if took > time.Second {
		t.Fatalf("stopped after %v; want it refused before it runs", took)
	}
	// ordinary patterns still match, and a bad one is the expression's own error
	for expr, want := range map[string]string{
		`object.v.matches("^v[0-9]+\\.[0-9]+$")`: "true",
		`matches(object.v, "^x")`:                "false",
	} {
		got, err := eval(t, expr, Object, map[string]any{"v": "v1.10"})
		if err != nil || got.Literal != want {
			t.Errorf("%s = %+v, %v; want %s", expr, got, err, want)
		}
	}
	if _, err := eval(t, `object.v.matches("(")`, Object, map[string]any{"v": "x"}); err == nil || !strings.Contains(err.Error(), "missing closing )") {
		t.Errorf("a bad pattern: %v", err)
	}
}

// wideObject is an object of two equal maps of 50 strings just under the cap, each string its
// own copy (Go compares a string with itself in no time): 6 MB, as an allowed kind's object may be.
func wideObject() map[string]any {
	obj := map[string]any{"kind": "Example"}
	for _, k := range []string{"a", "b"} {
		data := map[string]any{}
		for i := range 50 {
			data[fmt.Sprint("k", i)] = strings.Repeat("x", underCap)
		}
		obj[k] = data
	}
	return obj
}

// TestAttackDeepEqualityChargedByWhatItWalks: comparing two maps walks them; cel-go charges the
// comparison by their number of keys (5 units), so the cost limit allowed some 100,000
// comparisons of 3 MB each. Charged by what they walk (300,000 units each), they stop at the
// fourth.
func TestAttackDeepEqualityChargedByWhatItWalks(t *testing.T) {
	for _, expr := range []string{
		thousand + ".all(i, " + thousand + ".all(j, object.a == object.b))",
		thousand + ".all(i, " + thousand + ".all(j, object.a != object.b || true))",
		thousand + ".all(i, " + thousand + ".all(j, object.a in [object.b, object.b]))",
	} {
		p, err := Compile(expr, Object)
		if err != nil {
			t.Fatal(err)
		}
		took, err := evalBounded(t, p, wideObject(), noBudget, 20*time.Second)
		t.Logf("stopped after %v: %v", took, err)
		wantLimit(t, err, ErrCostLimit, costError)
		if took > 2*time.Second { // about 9s each when charged by the number of keys
			t.Fatalf("stopped after %v; want it stopped after four comparisons", took)
		}
	}
}

// TestCompileEstimateChargesConversions: over literals, the estimate charges a conversion by its
// input's size too: ten thousand conversions of a 3,000-byte literal (301 units each) are refused
// before they run.
func TestCompileEstimateChargesConversions(t *testing.T) {
	lit := `"` + strings.Repeat("1", 3000) + `"`
	ten := "[0,1,2,3,4,5,6,7,8,9]"
	expr := ten + ".map(a, " + ten + ".map(b, " + ten + ".map(c, " + ten + ".map(d, double(" + lit + ")))))[0][0][0][0]"
	_, err := Compile(expr, Object)
	if err == nil || !strings.Contains(err.Error(), "estimated cost is at least") {
		t.Fatalf("Compile = %v; want the estimate refused", err)
	}
}

// BenchmarkWorstExpression measures the most expensive expressions found under the bounds, one
// of each kind of work: conversions of an annotation just under the size cap (166 of 60 KB spend
// the cost limit), comparisons of two 3 MB maps, matches() of a compiled pattern of 400
// instructions, and plain nested comprehensions. "cost-limit" leaves the time budget out: the
// CPU the cost limit alone allows, the same on every machine but for its speed; "budget" runs
// them as the controller does (DefaultTimeBudget), where whichever bound comes first stops them.
// cpu-ns/op is the process's CPU time (user and system, the garbage collector's included) per
// evaluation.
func BenchmarkWorstExpression(b *testing.B) {
	cases := []struct {
		name, expr string
		obj        func() map[string]any
	}{
		{"conversions", conversionBomb, func() map[string]any { return bombService(underCap) }},
		{"deep-equality", thousand + ".all(i, " + thousand + ".all(j, object.a == object.b))", wideObject},
		{"regex", thousand + `.all(i, !object.s.matches("` + strings.Repeat(`a{100}`, 4) + `b"))`,
			func() map[string]any { return map[string]any{"s": strings.Repeat("a", 1200)} }},
		{"comprehensions", thousand + ".all(i, " + thousand + ".all(j, true))", func() map[string]any { return map[string]any{} }},
	}
	for _, budget := range []struct {
		name string
		d    time.Duration
	}{{"cost-limit", noBudget}, {"budget", DefaultTimeBudget}} {
		for _, c := range cases {
			b.Run(budget.name+"/"+c.name, func(b *testing.B) {
				p, err := Compile(c.expr, Object)
				if err != nil {
					b.Fatal(err)
				}
				obj := c.obj()
				before := cpuTime()
				for b.Loop() {
					_, err := p.EvalWithin(context.Background(), obj, budget.d)
					if !errors.Is(err, ErrCostLimit) && !errors.Is(err, ErrTimeBudget) {
						b.Fatalf("Eval = %v; want a bound", err)
					}
				}
				b.ReportMetric(float64(cpuTime()-before)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// cpuTime is the process's CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
