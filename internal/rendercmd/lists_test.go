package rendercmd

import (
	"reflect"
	"strings"
	"testing"
)

func TestSplitList(t *testing.T) {
	for _, c := range []struct {
		name       string
		in         string
		startsItem func(string) bool
		want       []string
	}{
		{"one item", "config.image", nil, []string{"config.image"}},
		{"two selectors", "config.image,other.name", nil, []string{"config.image", "other.name"}},
		{"two overrides", `a=1,b="x"`, nil, []string{"a=1", `b="x"`}},
		{"list value", "x.ids=[1,2],y=3", nil, []string{"x.ids=[1,2]", "y=3"}},
		{"nested dict and list", `x={"a":[1,2],"b":{"c":3}},y=1`, nil, []string{`x={"a":[1,2],"b":{"c":3}}`, "y=1"}},
		{"parentheses", "x=(1,2),y=1", nil, []string{"x=(1,2)", "y=1"}},
		{"double-quoted comma", `x.name="Alice,Bob",y=1`, nil, []string{`x.name="Alice,Bob"`, "y=1"}},
		{"single-quoted comma", `x.name='a,b',y=1`, nil, []string{`x.name='a,b'`, "y=1"}},
		{"escaped quote", `x="a\",b",y=1`, nil, []string{`x="a\",b"`, "y=1"}},
		{"triple-quoted", `x="""a,"b",c""",y=1`, nil, []string{`x="""a,"b",c"""`, "y=1"}},
		{"quote inside brackets", `x=["a]",1],y=1`, nil, []string{`x=["a]",1]`, "y=1"}},
		{"empty items are kept for the engine to refuse", "a,,b,", nil, []string{"a", "", "b", ""}},
		{"empty value", "", nil, []string{""}},
		{"unclosed bracket", "x=[1,2,y=1", nil, []string{"x=[1,2,y=1"}},
		{"unclosed quote", `x="a,b,y=1`, nil, []string{`x="a,b,y=1`}},
		{"stray closing bracket", "x=1],y=2", nil, []string{"x=1]", "y=2"}},
		{"no trimming", "a, b", nil, []string{"a", " b"}},
		{"arguments", "a=1,b=2", startsArgument, []string{"a=1", "b=2"}},
		{"argument value with commas", "hosts=a.com,b.com", startsArgument, []string{"hosts=a.com,b.com"}},
		{"argument number list without brackets", "l=1,2", startsArgument, []string{"l=1,2"}},
		{"argument list and dict", `l=[1,2],m={"k":1,"j":2}`, startsArgument, []string{"l=[1,2]", `m={"k":1,"j":2}`}},
		{"argument quoted name=", `s="x,y=z",t=1`, startsArgument, []string{`s="x,y=z"`, "t=1"}},
		{"argument names with dashes and dots", "env-type=TEST,a.b=1", startsArgument, []string{"env-type=TEST", "a.b=1"}},
		{"argument name after a space is not a name", "a=1, b=2", startsArgument, []string{"a=1, b=2"}},
		{"argument after an empty item", "a=1,,b=2", startsArgument, []string{"a=1,", "b=2"}},
		{"argument =value is no name", "a=1,=2", startsArgument, []string{"a=1,=2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := splitList(c.in, c.startsItem); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("splitList(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

const listsProgram = "config = {\n    image = \"nginx:1.0\"\n    replicas = 1\n    labels = {app = \"web\"}\n}\n" +
	"other = {name = \"x\"}\n"

// Comma lists and repeated flags reach the engine as the same items.
func TestCommaSeparatedListsReachTheEngine(t *testing.T) {
	dir := files(t, map[string]string{
		"main.k": listsProgram,
		"opt.k":  "a = option(\"a\")\nb = option(\"b\")\nc = option(\"c\")\nd = option(\"d\")\n",
	})
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"selectors", []string{"main.k", "-S", "config.image,other.name"}, "nginx:1.0\n---\nx"},
		{"repeated selectors", []string{"main.k", "-S", "config.image", "-S", "other.name"}, "nginx:1.0\n---\nx"},
		{"selectors listed and repeated", []string{"main.k", "-S", "config.image,config.replicas", "-S", "other.name"},
			"nginx:1.0\n---\n1\n---\nx"},
		{"overrides", []string{"main.k", "-O", `config.replicas=3,other.name="y"`, "-S", "config.replicas,other"},
			"3\n---\nname: 'y'"},
		{"override values with commas", []string{"main.k", "-O", `config.ids=[1,2],config.image="a,b"`, "-O", "config.labels-"},
			"config:\n  image: a,b\n  replicas: 1\n  ids:\n  - 1\n  - 2\nother:\n  name: x"},
		{"arguments", []string{"opt.k", "--format", "json", "-D", `a=1,b=[1,2],c={"k":"v","j":2}`, "-D", "d=x,y"},
			`{"a": 1, "b": [1, 2], "c": {"k": "v", "j": 2}, "d": "x,y"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runRender(t, dir, c.args...)
			if code != 0 || strings.TrimSpace(out) != c.want {
				t.Fatalf("code %d out %q err %q, want %q", code, out, errOut, c.want)
			}
		})
	}
	// An empty item is not dropped: the engine names it.
	_, errOut, code := runRender(t, dir, "main.k", "-S", "config.image,")
	if code != 1 || !strings.Contains(errOut, "invalid path select operand , value not found") {
		t.Fatalf("empty selector: code %d err %q", code, errOut)
	}
}

// What engine 0.12.1 makes of each override and selector form: plain paths of the main package
// work; the pkg:path forms of older kcl fail or are silently ignored.
func TestOverrideAndSelectorForms(t *testing.T) {
	dir := files(t, map[string]string{"main.k": listsProgram})
	for _, c := range []struct {
		name    string
		args    []string
		code    int
		out     string // stdout, trimmed, when code is 0
		errPart string // in stderr, when code is not 0
	}{
		{"selector path", []string{"-S", "config.image"}, 0, "nginx:1.0", ""},
		{"selector nested path", []string{"-S", "config.labels.app"}, 0, "web", ""},
		{"selector :path", []string{"-S", ":config.image"}, 1, "", "invalid path select operand :config.image, value not found"},
		{"selector __main__:path", []string{"-S", "__main__:config.image"}, 1, "",
			"invalid path select operand __main__:config.image, value not found"},
		{"override path=value", []string{"-O", `config.image="nginx:2.0"`, "-S", "config.image"}, 0, "nginx:2.0", ""},
		{"override path:value", []string{"-O", "config.replicas:3", "-S", "config.replicas"}, 0, "3", ""},
		{"override path-", []string{"-O", "config.labels-", "-S", "config"}, 0, "image: nginx:1.0\nreplicas: 1", ""},
		{"override unquoted string", []string{"-O", "config.image=nginx"}, 1, "", "name 'nginx' is not defined"},
		{"override :path=value", []string{"-O", `:config.image="nginx:2.0"`}, 1, "",
			`Invalid spec format ':config.image="nginx:2.0"'`},
		{"override __main__:path=value is ignored", []string{"-O", `__main__:config.image="nginx:2.0"`, "-S", "config.image"},
			0, "nginx:1.0", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errOut, code := runRender(t, dir, append([]string{"main.k"}, c.args...)...)
			if code != c.code || c.code == 0 && strings.TrimSpace(out) != c.out ||
				c.code != 0 && !strings.Contains(errOut, c.errPart) {
				t.Fatalf("code %d out %q err %q", code, out, errOut)
			}
		})
	}
}
