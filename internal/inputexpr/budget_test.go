package inputexpr

import (
	"context"
	"strings"
	"testing"
	"time"
)

// bombService is a Service with a 250 KB annotation, as a tenant may create one.
func bombService() map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "bomb", "annotations": map[string]any{"z": strings.Repeat("1", 250_000)}},
	}
}

// conversionBomb converts the annotation a million times: cel-go's default runtime cost charges
// a conversion one unit whatever its input's size.
var conversionBomb = func() string {
	list := "[" + strings.TrimSuffix(strings.Repeat("0,", 1000), ",") + "]"
	return list + ".all(i, " + list + ".all(j, double(object.metadata.annotations.z) > 0.0))"
}()

// evalBounded evaluates within wait at most: past it, the evaluation is cancelled and the test
// fails, so a runaway expression fails the test rather than holding it.
func evalBounded(t *testing.T, p *Program, value any, wait time.Duration) (Value, error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		v   Value
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		v, err := p.Eval(ctx, value)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err, time.Since(start)
	case <-time.After(wait):
		cancel()
		<-done
		t.Fatalf("the expression was still running after %v", wait)
	}
	return Value{}, nil, 0
}

// TestAttackConversionBombStopsAtCostLimit: the conversion bomb of issue 54 stops at the cost
// limit within a few conversions, since a conversion is charged by its input's size.
func TestAttackConversionBombStopsAtCostLimit(t *testing.T) {
	if len(conversionBomb) > MaxExpressionLength {
		t.Fatalf("the bomb is %d bytes", len(conversionBomb))
	}
	p, err := Compile(conversionBomb, Object)
	if err != nil {
		t.Fatal(err)
	}
	_, err, took := evalBounded(t, p, bombService(), 5*time.Second)
	t.Logf("stopped after %v: %v", took, err)
	if err == nil || !strings.Contains(err.Error(), costError) {
		t.Fatalf("Eval = %v; want the cost error", err)
	}
}
