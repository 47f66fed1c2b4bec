package inputexpr

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLiteralTypedByKCL: each Literal, given as `render -D vN=<Literal>` to the controller's own
// binary (the engine the controller runs), reaches the program with the value and the KCL type
// CEL gave it: "1.10" a string, 2.0 a float, quotes, backslashes, newlines, NUL, unicode and
// ${...} intact. It needs KCL_BINARY (bin/kcl-artifact-controller, see buildctl) and KCL_LIB.
func TestLiteralTypedByKCL(t *testing.T) {
	bin := os.Getenv("KCL_BINARY")
	if bin == "" || os.Getenv("KCL_LIB") == "" {
		t.Skip("KCL_BINARY and KCL_LIB are not both set: the KCL typing of literals is not checked")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("KCL_BINARY %s: %v: the KCL typing of literals is not checked", bin, err)
	}
	cases := []struct {
		expr, kclType string
		want          any
	}{
		{`"1.10"`, "str", "1.10"},
		{`"3"`, "str", "3"},
		{`"true"`, "str", "true"},
		{`"None"`, "str", "None"},
		{`""`, "str", ""},
		{`"a\"b\\c\nd\te é ☃ 😀 <>& \u0000 \u2028 ${1+2} $${x} {a} 'q'"`, "str", "a\"b\\c\nd\te é ☃ 😀 <>& \x00 \u2028 ${1+2} $${x} {a} 'q'"},
		{`3`, "int", json.Number("3")},
		{`-9223372036854775808`, "int", json.Number("-9223372036854775808")},
		{`9223372036854775807u`, "int", json.Number("9223372036854775807")},
		{`2.0`, "float", json.Number("2.0")},
		{`1.5`, "float", json.Number("1.5")},
		{`1e21`, "float", json.Number("1e21")},
		{`true`, "bool", true},
		{`false`, "bool", false},
	}
	dir := t.TempDir()
	var prog strings.Builder
	args := []string{"render", dir, "--format", "json"}
	for i, tc := range cases {
		v, err := eval(t, tc.expr, Object, map[string]any{})
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		fmt.Fprintf(&prog, "v%d = option(\"v%d\")\nt%d = typeof(v%d)\n", i, i, i, i)
		args = append(args, "-D", fmt.Sprintf("v%d=%s", i, v.Literal))
	}
	if err := os.WriteFile(filepath.Join(dir, "main.k"), []byte(prog.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	got := runRender(t, bin, args)
	for i, tc := range cases {
		if typ := got[fmt.Sprintf("t%d", i)]; typ != tc.kclType {
			t.Errorf("%s: KCL type %v, want %s", tc.expr, typ, tc.kclType)
		}
		if v := got[fmt.Sprintf("v%d", i)]; v != tc.want {
			t.Errorf("%s: KCL value %#v, want %#v", tc.expr, v, tc.want)
		}
	}
}

func runRender(t *testing.T, bin string, args []string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s render: %v\n%s", bin, err, stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	dec.UseNumber()
	var got map[string]any
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("decoding the render: %v\n%s", err, stdout.String())
	}
	return got
}
