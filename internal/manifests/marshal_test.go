package manifests

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// tricky is YAML whose numbers, keys and strings take every path of the JSON round trip that
// marshal skips: ints near the int64 and uint64 limits, floats written with and without an
// exponent, integral floats, keys go-yaml sorts by their digits, strings YAML would read as
// something else.
const tricky = `
apiVersion: v1
kind: ConfigMap
metadata: {name: tricky, namespace: ns, labels: {a10: x, a9: y, A: z, _b: w, "1": one, "10": ten, "2": two, "true": t}}
numbers:
  ints: [0, -0, 1, -1, 42, 9007199254740993, 9223372036854775807, -9223372036854775808, 9223372036854775808, 18446744073709551615, 18446744073709551616, 123456789012345678901234]
  floats: [0.0, -0.0, 0.1, 1.5, -2.25, 3.0, 1e-6, 1e-7, 1.5e-9, 1e20, 1e21, 1.2345e21, 1e300, 5e-324, 123456789.123456789, 0.000001, 1e6, 100000000000000000000.0]
  strings: ["1", "1.0", "1e3", "0x1F", "0o17", "0b101", "+1", ".5", "1_000", "2006-01-02", "2006-01-02T15:04:05Z", "yes", "no", "on", "off", "y", "n", "~", "null", "true", "False", "", " lead", "trail ", "a: b", "- x", "#c", "multi\nline\n", "tab\there", "ünïcödé", "<&>", "\u2028", "'q'", "\"dq\""]
  mixed: [null, true, false, {}, [], [[]], {a: {}}]
nested:
  deep: {z: [1, {y: 2.5, x: [3e25, "4"]}], a: -1e-10}
`

func TestMarshalIsByteIdenticalToSigsYAML(t *testing.T) {
	docs := map[string][]byte{"tricky": []byte(tricky)}
	goldens := 0
	_ = filepath.WalkDir("../../../shared/kcl-conformance/cases", func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Name() == "stdout.golden" {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			docs[p] = b
			goldens++
		}
		return nil
	})
	compared := 0
	for name, doc := range docs {
		for i, d := range bytes.Split(doc, []byte("\n---\n")) {
			if sameAsSigsYAML(t, name, i, d) {
				compared++
			}
		}
	}
	t.Logf("%d documents compared (%d KCL conformance goldens)", compared, goldens)
	if compared < 1 {
		t.Fatal("nothing compared")
	}
}

// sameAsSigsYAML decodes d as Stream does and fails unless marshal writes what
// sigs.k8s.io/yaml.Marshal does, or, where the latter's output varies from run to run (see
// TestMarshalIsDeterministic), one of its outputs; it reports whether d was a mapping.
func sameAsSigsYAML(t *testing.T, name string, i int, d []byte) bool {
	t.Helper()
	if decode(t, d) == nil {
		return false
	}
	got, err := marshal(decode(t, d))
	if err != nil {
		t.Fatalf("%s #%d: %v", name, i, err)
	}
	var want []byte
	for range 50 {
		if want, err = yaml.Marshal(decode(t, d)); err != nil {
			t.Fatalf("%s #%d: sigs.k8s.io/yaml: %v", name, i, err)
		}
		if bytes.Equal(got, want) {
			return true
		}
	}
	t.Fatalf("%s #%d differs:\n--- sigs.k8s.io/yaml\n%s\n--- marshal\n%s", name, i, want, got)
	return false
}

func decode(t *testing.T, d []byte) map[string]any {
	var m map[string]any
	if yaml.Unmarshal(d, &m) != nil {
		return nil
	}
	return m
}

// TestMarshalIsDeterministic: go-yaml's key order is not a total one, and sigs.k8s.io/yaml
// sorts a Go map's keys, which come in random order: the same object gave different bytes,
// hence a new artifact digest and a needless re-publish, from one render to the next.
func TestMarshalIsDeterministic(t *testing.T) {
	const doc = "0: {1A07701110702170002720: a, \"17220202\": b, 7110097Ya10018: c}\n"
	outputs := func(f func(map[string]any) ([]byte, error)) int {
		seen := map[string]bool{}
		for range 200 {
			b, err := f(decode(t, []byte(doc)))
			if err != nil {
				t.Fatal(err)
			}
			seen[string(b)] = true
		}
		return len(seen)
	}
	t.Logf("sigs.k8s.io/yaml.Marshal: %d different outputs in 200 runs", outputs(func(m map[string]any) ([]byte, error) { return yaml.Marshal(m) }))
	if n := outputs(marshal); n != 1 {
		t.Fatalf("marshal: %d different outputs in 200 runs", n)
	}
}

func TestMarshalTakesTheRoundTripForValuesJSONCannotDecode(t *testing.T) {
	obj := map[string]any{"m": int64(3), "s": []any{uint8(4)}}
	got, err := marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if want := "m: 3\ns:\n- 4\n"; string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func FuzzMarshalIsByteIdenticalToSigsYAML(f *testing.F) {
	for _, d := range strings.Split(tricky, "\n") {
		f.Add(d)
	}
	f.Add("a: [1e21, 9223372036854775808, -0.0, 0.1]")
	f.Fuzz(func(t *testing.T, d string) {
		sameAsSigsYAML(t, "fuzz", 0, []byte(d))
	})
}

// deployment is a typical rendered object for BenchmarkMarshal.
const deployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: app, namespace: apps, labels: {app: app, tier: web}, annotations: {team: platform}}
spec:
  replicas: 3
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app, tier: web}}
    spec:
      containers:
      - name: app
        image: ghcr.io/example/app:1.2.3
        ports: [{containerPort: 8080, name: http}]
        env: [{name: LOG_LEVEL, value: info}, {name: WORKERS, value: "4"}]
        resources: {limits: {cpu: 500m, memory: 256Mi}, requests: {cpu: 100m, memory: 128Mi}}
        readinessProbe: {httpGet: {path: /healthz, port: http}, periodSeconds: 10}
`

// BenchmarkMarshal compares marshal with sigs.k8s.io/yaml.Marshal on one Deployment; run with
// `go test -bench Marshal ./internal/manifests` and compare ns/op and allocs/op.
func BenchmarkMarshal(b *testing.B) {
	for name, f := range map[string]func(map[string]any) ([]byte, error){
		"sigs.k8s.io-yaml": func(m map[string]any) ([]byte, error) { return yaml.Marshal(m) },
		"marshal":          marshal,
	} {
		b.Run(name, func(b *testing.B) {
			var m map[string]any
			if err := yaml.Unmarshal([]byte(deployment), &m); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := f(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
