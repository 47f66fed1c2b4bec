package fluxkcl

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

func digest(c string) string { return "sha256:" + strings.Repeat(c, 64) }

func historyOf(current string, entries ...kclv1.ArtifactHistoryEntry) *kclv1.KCLArtifact {
	obj := &kclv1.KCLArtifact{}
	obj.Name = "app"
	obj.Status.Artifact = &meta.Artifact{Digest: current}
	obj.Status.History = entries
	return obj
}

func TestPreviousHealthy(t *testing.T) {
	obj := historyOf(digest("b"),
		kclv1.ArtifactHistoryEntry{Digest: digest("c"), Health: kclv1.HealthHealthy}, // newer than current: a pin
		kclv1.ArtifactHistoryEntry{Digest: digest("b"), Health: kclv1.HealthFailed},
		kclv1.ArtifactHistoryEntry{Digest: digest("d"), Health: kclv1.HealthHealthy, Missing: true},
		kclv1.ArtifactHistoryEntry{Digest: digest("e"), Health: kclv1.HealthNotApplied},
		kclv1.ArtifactHistoryEntry{Digest: digest("a"), Health: kclv1.HealthHealthy},
	)
	if h, err := previousHealthy(obj); err != nil || h.Digest != digest("a") {
		t.Errorf("previousHealthy = %s, %v; want %s", h.Digest, err, digest("a"))
	}
	obj.Status.Remediation = &kclv1.RemediationStatus{Quarantined: &kclv1.QuarantinedArtifact{Digest: digest("a")}}
	if h, err := previousHealthy(obj); err == nil {
		t.Errorf("previousHealthy chose %s, the quarantined artifact", h.Digest)
	}
	obj.Status.Remediation = nil
	obj.Status.History = obj.Status.History[:4]
	if _, err := previousHealthy(obj); err == nil {
		t.Error("previousHealthy found an entry without a healthy one in storage")
	}
}

func TestFindEntry(t *testing.T) {
	obj := historyOf(digest("a"),
		kclv1.ArtifactHistoryEntry{Digest: "sha256:12345678" + strings.Repeat("0", 56)},
		kclv1.ArtifactHistoryEntry{Digest: "sha256:12345678" + strings.Repeat("1", 56)},
		kclv1.ArtifactHistoryEntry{Digest: digest("f"), Missing: true},
	)
	for prefix, want := range map[string]string{
		"sha256:123456780":  "",
		"sha256:12345678":   "matches 2 artifacts",
		"sha256:1234":       "not found", // too short to be a prefix
		"sha256:99999999":   "not found",
		digest("f"):         "missing from storage",
		"sha256:1234567811": "",
	} {
		_, err := findEntry(obj, prefix)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("findEntry(%s) = %v, want %q", prefix, err, want)
		}
	}
}

func TestTruncateHex(t *testing.T) {
	in := "latest@sha256:" + strings.Repeat("ab", 32) + " from main@sha1:" + strings.Repeat("c", 40)
	if got, want := truncateHex(in), "latest@sha256:abababab from main@sha1:cccccccc"; got != want {
		t.Errorf("truncateHex = %q, want %q", got, want)
	}
}

func TestPrintTable(t *testing.T) {
	var b bytes.Buffer
	if err := printTable(&b, []string{"Name", "Ready"}, [][]string{{"a-long-name", "True"}, {"b", "False"}}); err != nil {
		t.Fatal(err)
	}
	want := "NAME       \tREADY\na-long-name\tTrue\nb          \tFalse\n"
	if b.String() != want {
		t.Errorf("table:\n%q\nwant\n%q", b.String(), want)
	}
}

func TestTree(t *testing.T) {
	ks := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"inventory": map[string]any{
		"entries": []any{
			map[string]any{"id": "apps_app-config__ConfigMap", "v": "v1"},
			map[string]any{"id": "_apps__Namespace", "v": "v1"},
			map[string]any{"id": "malformed"},
		}}}}}
	root := treeNode{Resource: "GitRepository/apps/app", Resources: []treeNode{{Resource: "KCLArtifact/apps/app",
		Resources: []treeNode{{Resource: "Kustomization/apps/app", Resources: inventoryNodes(ks)}, {Resource: "X/y"}}}}}
	var b bytes.Buffer
	printTree(&b, root)
	want := `GitRepository/apps/app
└── KCLArtifact/apps/app
    ├── Kustomization/apps/app
    │   ├── ConfigMap/apps/app-config
    │   └── Namespace/apps
    └── X/y
`
	if b.String() != want {
		t.Errorf("tree:\n%s\nwant\n%s", b.String(), want)
	}
}

func TestCheckOutput(t *testing.T) {
	for _, c := range []struct {
		output  string
		formats []string
		want    string
	}{
		{"json", []string{"json", "yaml"}, ""},
		{"", []string{"", "json", "yaml"}, ""},
		{"table", []string{"json", "yaml"}, "--output must be json or yaml, not table"},
		{"wide", []string{"table", "json", "yaml"}, "--output must be table, json or yaml, not wide"},
		{"table", []string{"", "json", "yaml"}, "--output must be json or yaml, not table"}, // "" is the drawing, not a name
	} {
		err := checkOutput(c.output, c.formats...)
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
			t.Errorf("checkOutput(%q, %q) = %v, want %q", c.output, c.formats, err, c.want)
		}
	}
}

// hostile is what a tenant writes into a revision or a message: screen clear, window title, an
// OSC 8 link, a C1 CSI, a right-to-left override, and a line feed and tabs forging a row.
const hostile = "\x1b[2J\x1b]0;t\x07\x1b]8;;http://evil\x07\u009b\u202e\nforged\trow"

func TestTableCellsHoldTheirValue(t *testing.T) {
	var b bytes.Buffer
	if err := printTable(&b, []string{"Name", "Message"}, [][]string{{"a", hostile}, {"b", "ok"}}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 3 || strings.Count(lines[1], "\t") != 1 || strings.ContainsAny(b.String(), "\x1b\x07\u009b\u202e") {
		t.Errorf("table of a hostile cell:\n%q", b.String())
	}
	if want := `a   ` + "\t" + `\x1b[2J\x1b]0;t\x07\x1b]8;;http://evil\x07\u009b\u202e\nforged\trow`; lines[1] != want {
		t.Errorf("row %q, want %q", lines[1], want)
	}
}

func TestTreeNodesAreOneLine(t *testing.T) {
	var b bytes.Buffer
	printTree(&b, treeNode{Resource: "KCLArtifact/apps/app", Resources: []treeNode{{Resource: "ConfigMap/apps/" + hostile}}})
	if strings.Count(b.String(), "\n") != 2 || strings.ContainsAny(b.String(), "\x1b\x07\u009b\u202e") {
		t.Errorf("tree of a hostile name:\n%q", b.String())
	}
}

// Everything the plugin writes on stderr is escaped, whatever writes it: a progress line is one
// line, and an error too.
func TestStderrIsEscaped(t *testing.T) {
	var out bytes.Buffer
	logger{termsafe.NewWriter(&out)}.Successf("applied revision %s", hostile)
	if want := `✔ applied revision \x1b[2J\x1b]0;t\x07\x1b]8;;http://evil\x07\u009b\u202e\nforged\trow` + "\n"; out.String() != want {
		t.Errorf("progress line %q, want %q", out.String(), want)
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"version", "--client", "-n", hostile}, &stdout, &stderr); code != 1 ||
		strings.Count(stderr.String(), "\n") != 1 || strings.ContainsAny(stderr.String(), "\x1b\x07\u009b\u202e") {
		t.Errorf("Main with a hostile namespace: exit %d, stderr %q", code, stderr.String())
	}
}

// -o yaml keeps a tenant's text exactly, C1 controls included, and numbers as numbers.
func TestYAMLKeepsValues(t *testing.T) {
	var out bytes.Buffer
	a := &app{stdout: &out}
	in := []kclv1.ArtifactHistoryEntry{{Digest: digest("a"), SourceRevision: hostile, Objects: 3}}
	if err := a.printData("yaml", in); err != nil {
		t.Fatal(err)
	}
	var back []kclv1.ArtifactHistoryEntry
	if err := sigsyaml.Unmarshal(out.Bytes(), &back); err != nil || len(back) != 1 || back[0].SourceRevision != hostile || back[0].Objects != 3 {
		t.Errorf("-o yaml %q read back as %+v, %v", out.String(), back, err)
	}
	if !strings.Contains(out.String(), "\n  objects: 3\n") {
		t.Errorf("-o yaml: %q", out.String())
	}
}
