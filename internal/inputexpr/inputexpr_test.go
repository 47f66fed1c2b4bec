package inputexpr

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// service is a Service as the API server returns it, decoded from JSON.
func service() map[string]any {
	return map[string]any{
		"apiVersion": "v1",
		"kind":       "Service",
		"metadata": map[string]any{
			"name":   "web",
			"labels": map[string]any{"app.kubernetes.io/name": "web"},
		},
		"spec": map[string]any{
			"clusterIP": "10.0.0.7",
			"ports":     []any{map[string]any{"port": int64(8080)}},
		},
		"status": map[string]any{
			"loadBalancer": map[string]any{"ingress": []any{map[string]any{"ip": "203.0.113.4"}}},
			"ready":        true,
			"ratio":        0.5,
			"whole":        2.0,
			"version":      "1.10",
			"count":        int64(3),
		},
	}
}

func eval(t *testing.T, expr, v string, value any) (Value, error) {
	t.Helper()
	p, err := Compile(expr, v)
	if err != nil {
		t.Fatalf("Compile(%s): %v", expr, err)
	}
	return p.Eval(context.Background(), value)
}

// TestScalarKinds: each scalar kind becomes the literal KCL types the same way, and its text.
func TestScalarKinds(t *testing.T) {
	for _, tc := range []struct{ expr, literal, text string }{
		{`object.spec.clusterIP`, `"10.0.0.7"`, `10.0.0.7`},
		{`object.status.version`, `"1.10"`, `1.10`}, // stays a string, never the float 1.1
		{`"3"`, `"3"`, `3`},
		{`"true"`, `"true"`, `true`},
		{`""`, `""`, ``},
		{`"a\"b\\c\nd é ☃ <>&\u0000"`, `"a\"b\\c\nd é ☃ <>&\u0000"`, "a\"b\\c\nd é ☃ <>&\x00"},
		{`object.spec.ports[0].port`, `8080`, `8080`},
		{`object.status.count`, `3`, `3`},
		{`-9223372036854775808`, `-9223372036854775808`, `-9223372036854775808`},
		{`9223372036854775807u`, `9223372036854775807`, `9223372036854775807`},
		{`object.status.ratio`, `0.5`, `0.5`},
		{`object.status.whole`, `2.0`, `2.0`}, // a float stays a float: 2 would be an int in KCL
		{`-0.0`, `-0.0`, `-0.0`},
		{`1e21`, `1e+21`, `1e+21`},
		{`object.status.ready`, `true`, `true`},
		{`!object.status.ready`, `false`, `false`},
		{`object.spec.ports[0].port + 1`, `8081`, `8081`},
		{`string(object.spec.ports[0].port)`, `"8080"`, `8080`},
		{`object.?spec.?missing.orValue("none")`, `"none"`, `none`},
		{`object.status.count > 2 ? "many" : "few"`, `"many"`, `many`},
		{`object.metadata.labels["app.kubernetes.io/name"]`, `"web"`, `web`},
	} {
		got, err := eval(t, tc.expr, Object, service())
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if got.Literal != tc.literal || got.Text != tc.text {
			t.Errorf("%s = {Literal: %s, Text: %q}; want {Literal: %s, Text: %q}", tc.expr, got.Literal, got.Text, tc.literal, tc.text)
		}
	}
}

// TestNonScalarRefused: lists, maps, null, bytes, timestamps, durations, types and optionals
// are refused, at compile time when the type is known and at evaluation otherwise.
func TestNonScalarRefused(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`[1, 2]`, "returned a list"},
		{`{"a": 1}`, "returned a map"},
		{`null`, "returned null"},
		{`b"x"`, "returned bytes"},
		{`timestamp("2026-01-01T00:00:00Z")`, "returned a timestamp"},
		{`duration("1s")`, "returned a duration"},
		{`type(1)`, "returned a type"},
		{`object.?spec`, "returned an optional value"},
		{`object.spec.ports`, "returned a list"}, // dyn: found at evaluation
		{`object.spec`, "returned a map"},
		{`object.status.none`, "returned null"},
		{`18446744073709551615u`, "over KCL's largest integer"},
		{`1.0 / 0.0`, "KCL has no such number"},
	} {
		obj := service()
		obj["status"].(map[string]any)["none"] = nil
		_, err := compileEval(tc.expr, obj)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want %q", tc.expr, err, tc.want)
			continue
		}
		if strings.Contains(tc.want, "returned") && !strings.Contains(err.Error(), "an argument must be a string, number or bool") {
			t.Errorf("%s: %v; want the allowed kinds named", tc.expr, err)
		}
	}
}

func compileEval(expr string, obj map[string]any) (Value, error) {
	p, err := Compile(expr, Object)
	if err != nil {
		return Value{}, err
	}
	return p.Eval(context.Background(), obj)
}

// TestCompileErrorIsClear: CEL's message with the position, under our own prefix.
func TestCompileErrorIsClear(t *testing.T) {
	for _, tc := range []struct {
		expr, v string
		want    []string
	}{
		{`object.spec.`, Object, []string{"does not compile", "expression:1:13", "Syntax error"}},
		{`obj.spec`, Object, []string{"does not compile", "undeclared reference to 'obj'"}},
		{`object.spec.x + 1 == "a"`, Object, []string{"does not compile", "no matching overload"}},
		{`objects.size()`, Object, []string{"undeclared reference to 'objects'"}},
		{`   `, Object, []string{"the expression is empty"}},
		{`object`, "other", []string{`unknown expression variable "other"`}},
	} {
		_, err := Compile(tc.expr, tc.v)
		if err == nil {
			t.Errorf("%s: compiled; want an error", tc.expr)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tc.expr, err, w)
			}
		}
		if strings.Contains(err.Error(), "<input>") {
			t.Errorf("%s: %q names CEL's <input>", tc.expr, err)
		}
	}
}

// TestMissingKeyNamesIt: a missing field is an error naming the key.
func TestMissingKeyNamesIt(t *testing.T) {
	for _, tc := range []struct{ expr, key string }{
		{`object.spec.clusterIPs`, "clusterIPs"},
		{`object.status.loadBalancer.ingress[0].hostname`, "hostname"},
		{`object["no/such"]`, "no/such"},
	} {
		_, err := eval(t, tc.expr, Object, service())
		if err == nil || !strings.Contains(err.Error(), "no such key: "+tc.key) {
			t.Errorf("%s: %v; want the key %q named", tc.expr, err, tc.key)
		}
	}
	_, err := eval(t, `object.status.loadBalancer.ingress[1].ip`, Object, service())
	if err == nil || !strings.Contains(err.Error(), "index out of bounds: 1") {
		t.Errorf("index 1 of a one-element list: %v", err)
	}
}

// TestObjectsForms: Objects reads []any and []map[string]any alike.
func TestObjectsForms(t *testing.T) {
	maps := []map[string]any{service(), {"kind": "Deployment", "metadata": map[string]any{"name": "api"}}}
	anys := []any{maps[0], maps[1]}
	expr := `objects.filter(o, o.kind == "Deployment")[0].metadata.name`
	for name, value := range map[string]any{"[]map[string]any": maps, "[]any": anys} {
		got, err := eval(t, expr, Objects, value)
		if err != nil || got.Literal != `"api"` {
			t.Errorf("%s: %+v, %v", name, got, err)
		}
	}
	got, err := eval(t, `size(objects)`, Objects, anys)
	if err != nil || got.Literal != "2" {
		t.Errorf("size(objects) = %+v, %v", got, err)
	}
}

// TestConcurrentEval: one Program evaluated from many goroutines gives each its own answer and
// its own cost budget: four evaluations of ~610,000 each pass, which a shared budget would not
// (run with -race where cgo is available). The time budget is left out: four such evaluations at
// once on a busy machine may well take longer than the default.
func TestConcurrentEval(t *testing.T) {
	p, err := Compile(`object.metadata.name + "-" + string(size(object.spec.items))`, Object)
	if err != nil {
		t.Fatal(err)
	}
	near, err := Compile(`objects.all(a, objects.all(b, true))`, Objects)
	if err != nil {
		t.Fatal(err)
	}
	objs := manyObjects(450) // 3 units a step: 607,502
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := 0; i < 16; i++ {
		wg.Go(func() {
			name := strings.Repeat("n", i+1)
			items := make([]any, i)
			got, err := p.Eval(context.Background(), map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{"items": items}})
			want := name + "-" + strconv.Itoa(i)
			if err != nil || got.Text != want {
				errs <- "got " + got.Text + " want " + want
			}
			if i%4 == 0 {
				if _, err := near.EvalWithin(context.Background(), objs, time.Hour); err != nil {
					errs <- "near the limit: " + err.Error()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
