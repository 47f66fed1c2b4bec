package inputexpr

import (
	"context"
	"strings"
	"testing"
)

// TestFieldPath: each accepted path becomes the expected CEL, and that CEL reads the field.
func TestFieldPath(t *testing.T) {
	obj := service()
	meta := obj["metadata"].(map[string]any)
	meta["annotations"] = map[string]any{
		`say "hi"`:    "quoted",
		`back\slash`:  "slashed",
		`it's`:        "apostrophe",
		"line\nbreak": "newline",
		"ключ ☃":      "unicode",
		"x-y_z.0":     "dotted",
	}
	for _, tc := range []struct{ path, cel, text string }{
		{`.spec.clusterIP`, `object["spec"]["clusterIP"]`, "10.0.0.7"},
		{`.status.loadBalancer.ingress[0].ip`, `object["status"]["loadBalancer"]["ingress"][0]["ip"]`, "203.0.113.4"},
		{`.metadata.labels["app.kubernetes.io/name"]`, `object["metadata"]["labels"]["app.kubernetes.io/name"]`, "web"},
		{`.metadata.labels['app.kubernetes.io/name']`, `object["metadata"]["labels"]["app.kubernetes.io/name"]`, "web"},
		{`["spec"]["clusterIP"]`, `object["spec"]["clusterIP"]`, "10.0.0.7"},
		{`.spec.ports[0].port`, `object["spec"]["ports"][0]["port"]`, "8080"},
		{`.metadata.annotations["say \"hi\""]`, `object["metadata"]["annotations"]["say \"hi\""]`, "quoted"},
		{`.metadata.annotations['say "hi"']`, `object["metadata"]["annotations"]["say \"hi\""]`, "quoted"},
		{`.metadata.annotations["back\\slash"]`, `object["metadata"]["annotations"]["back\\slash"]`, "slashed"},
		{`.metadata.annotations['it\'s']`, `object["metadata"]["annotations"]["it's"]`, "apostrophe"},
		{".metadata.annotations[\"line\nbreak\"]", `object["metadata"]["annotations"]["line\nbreak"]`, "newline"},
		{`.metadata.annotations["ключ ☃"]`, `object["metadata"]["annotations"]["ключ ☃"]`, "unicode"},
		{`.metadata.annotations["x-y_z.0"]`, `object["metadata"]["annotations"]["x-y_z.0"]`, "dotted"},
	} {
		got, err := FieldPath(tc.path)
		if err != nil || got != tc.cel {
			t.Errorf("FieldPath(%s) = %s, %v; want %s", tc.path, got, err, tc.cel)
			continue
		}
		p, err := Compile(got, Object)
		if err != nil {
			t.Errorf("Compile(%s): %v", got, err)
			continue
		}
		v, err := p.Eval(context.Background(), obj)
		if err != nil || v.Text != tc.text {
			t.Errorf("%s = %+v, %v; want %q", tc.path, v, err, tc.text)
		}
	}
}

// TestFieldPathRefused: everything else is refused with the position and what to write.
func TestFieldPathRefused(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{``, "starts with '.'"},
		{`spec.clusterIP`, "starts with '.'"},
		{`{.spec.clusterIP}`, "starts with '.'"},
		{`.`, "position 1: '.' must be followed by a field name"},
		{`.spec..clusterIP`, "position 6: '.' must be followed by a field name"},
		{`.metadata.labels.app.kubernetes.io/name`, `position 35: expected '.name'`},
		{`.spec.ports[*].port`, "wildcards and filters need a CEL expression"},
		{`.spec.ports[?(@.port==80)]`, "wildcards and filters need a CEL expression"},
		{`.spec.ports[-1]`, "expected a list index"},
		{`.spec.ports[01]`, "expected a list index"},
		{`.spec.ports[+1]`, "expected a list index"},
		{`.spec.ports[]`, "expected a list index"},
		{`.spec.ports[1000000000]`, "expected a list index"},
		{`.spec.ports[0`, "'[' is not closed"},
		{`.metadata.labels["a`, "the quoted key is not closed"},
		{`.metadata.labels["a"`, "must be closed with ']'"},
		{`.metadata.labels["a"x]`, "must be closed with ']'"},
		{`.metadata.labels["a\n"]`, `only \\ and \" may be escaped`},
		{`.spec.clusterIP + "x"`, "position 16"},
		{`.spec.clusterIP) || true || (object`, "position 16"},
		{".spec.\xff", "not valid UTF-8"},
		{strings.Repeat(".a", MaxFieldPathSteps+1), "more than 100 steps"},
		{`.a["` + strings.Repeat("\n", 3000) + `"]`, "bytes as CEL, over the limit of 4096 bytes"},
	} {
		got, err := FieldPath(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FieldPath(%q) = %q, %v; want an error with %q", tc.path, got, err, tc.want)
		}
	}
}

// TestFieldPathLongest: the longest accepted path compiles.
func TestFieldPathLongest(t *testing.T) {
	c, err := FieldPath(strings.Repeat(".a", MaxFieldPathSteps))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(c, Object); err != nil {
		t.Fatalf("Compile(%d steps): %v", MaxFieldPathSteps, err)
	}
}

// TestAttackFieldPathCannotInject: a key that looks like CEL stays a key.
func TestAttackFieldPathCannotInject(t *testing.T) {
	for _, path := range []string{
		`.metadata.labels["\"] || true || object[\""]`,
		`.metadata.labels['"] + object.spec.clusterIP + ["']`,
		`.metadata.labels["\\"]`,
	} {
		got, err := FieldPath(path)
		if err != nil {
			t.Fatalf("FieldPath(%s): %v", path, err)
		}
		p, err := Compile(got, Object)
		if err != nil {
			t.Fatalf("Compile(%s): %v", got, err)
		}
		_, err = p.Eval(context.Background(), service())
		if err == nil || !strings.Contains(err.Error(), "no such key") {
			t.Errorf("%s (CEL %s) = %v; want a missing key, the whole text being one key", path, got, err)
		}
	}
}
