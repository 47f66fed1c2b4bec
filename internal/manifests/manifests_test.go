package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
)

func TestParseAcceptsStreamsObjectsAndItemLists(t *testing.T) {
	for name, tc := range map[string]struct {
		in    string
		names []string
	}{
		"stream":       {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: b}\n", []string{"a", "b"}},
		"one object":   {"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: x\n", []string{"a"}},
		"items":        {"items:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b}\n", []string{"a", "b"}},
		"List kind":    {"apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n", []string{"a"}},
		"empty docs":   {"---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n", []string{"a"}},
		"nothing":      {"", nil},
		"same name ns": {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ns1}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ns2}\n", []string{"a", "a"}},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := Parse([]byte(tc.in), 0)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, o := range objs {
				names = append(names, o.GetName())
			}
			if strings.Join(names, ",") != strings.Join(tc.names, ",") {
				t.Fatalf("got %v, want %v", names, tc.names)
			}
		})
	}
}

func TestParseRefusesWhatIsNotAnObject(t *testing.T) {
	for name, tc := range map[string]struct{ in, want string }{
		"attributes":    {"name: x\nreplicas: 2\n", "document 1 is not a Kubernetes object: it needs apiVersion and kind (top-level keys: [name replicas])"},
		"scalar":        {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n42\n", "document 2 is not a mapping"},
		"no name":       {"apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", "document 1 (v1 ConfigMap) has no metadata.name"},
		"bad namespace": {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: Not_Valid}\n", "invalid metadata.namespace"},
		"bad item":      {"items:\n- 1\n", "document 1, item 0 is not a mapping"},
		"items scalar":  {"items: 3\n", "items is not a list"},
		"duplicate":     {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", "ConfigMap /a is rendered twice"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in), 0)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestInventoryAndStreamRoundTrip(t *testing.T) {
	in := "apiVersion: v1\nkind: Secret\nmetadata: {name: z}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a, namespace: ns}\n"
	var b bytes.Buffer
	split, err := StreamPhases(strings.NewReader(in), func(phases.Phase) io.Writer { return &b }, 0, "r")
	if err != nil {
		t.Fatal(err)
	}
	refs := split.Refs
	inv := InventoryOf(refs)
	if inv[0].Kind != "Deployment" || inv[1].Kind != "Secret" || inv[0].APIVersion != "apps/v1" || inv[0].Namespace != "ns" {
		t.Fatalf("inventory not sorted or incomplete: %+v", inv)
	}
	if refs[0].Kind != "Secret" {
		t.Fatalf("stream order not kept: %+v", refs)
	}
	again, err := Parse(b.Bytes(), 0)
	if err != nil || len(again) != 2 || again[0].GetKind() != "Secret" {
		t.Fatalf("round trip: %v %v", again, err)
	}
}

func TestObjectCountAndInventoryAreBounded(t *testing.T) {
	var b strings.Builder
	for i := range MaxInventory + 5 {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c%05d, namespace: ns}\n", i)
	}
	var tm *TooManyObjectsError
	if _, err := Parse([]byte(b.String()), 100); !errors.As(err, &tm) || tm.Max != 100 {
		t.Fatalf("want TooManyObjectsError naming 100, got %v", err)
	}
	objs, err := Parse([]byte(b.String()), 0)
	if err != nil {
		t.Fatal(err)
	}
	if inv := Inventory(objs); len(inv) != MaxInventory || inv[0].Name != "c00000" {
		t.Fatalf("inventory of %d objects: %d entries, first %+v", len(objs), len(inv), inv[0])
	}
}

func TestStreamPhasesSplitsAndMarksJobs(t *testing.T) {
	in := `apiVersion: batch/v1
kind: Job
metadata: {name: migrate, annotations: {kcl.contrib.fluxcd.io/phase: pre}}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: i}]}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, annotations: {helm.sh/hook: pre-install}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
---
apiVersion: batch/v1
kind: Job
metadata: {name: smoke, annotations: {argocd.argoproj.io/hook: PostSync}}
spec: {template: {metadata: {annotations: {keep: me}}, spec: {restartPolicy: Never, containers: [{name: s, image: i}]}}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: cleanup, annotations: {helm.sh/hook: pre-delete}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: main-job}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: s, image: i}]}}}
`
	out := map[phases.Phase]*bytes.Buffer{}
	split, err := StreamPhases(strings.NewReader(in), func(p phases.Phase) io.Writer {
		if out[p] == nil {
			out[p] = &bytes.Buffer{}
		}
		return out[p]
	}, 0, "sha256:abc")
	if err != nil {
		t.Fatal(err)
	}
	if !split.Phased() || split.Counts[phases.Pre] != 2 || split.Counts[phases.Main] != 2 || split.Counts[phases.Post] != 1 {
		t.Fatalf("counts %v", split.Counts)
	}
	if len(split.Skipped) != 1 || split.Skipped[0].Name != "cleanup" || len(split.Refs) != 5 {
		t.Fatalf("skipped %v, refs %v", split.Skipped, split.Refs)
	}
	revision := func(p phases.Phase, name string) string {
		objs, err := Parse(out[p].Bytes(), 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetName() == name {
				return o.Object["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["annotations"].(map[string]any)[phases.RevisionAnnotation].(string)
			}
		}
		t.Fatalf("%s not in phase %s", name, p)
		return ""
	}
	if revision(phases.Pre, "migrate") != "sha256:abc" || revision(phases.Post, "smoke") != "sha256:abc" {
		t.Fatal("the pre and post Jobs do not carry the revision")
	}
	if !strings.Contains(out[phases.Post].String(), "keep: me") {
		t.Fatal("the Job's own template annotations were lost")
	}
	if strings.Contains(out[phases.Main].String(), phases.RevisionAnnotation) {
		t.Fatal("a main Job got the revision: it would be recreated for every artifact")
	}
}

func TestStreamPhasesRefusesAnUnknownPhase(t *testing.T) {
	in := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, annotations: {kcl.contrib.fluxcd.io/phase: later}}\n"
	_, err := StreamPhases(strings.NewReader(in), func(phases.Phase) io.Writer { return io.Discard }, 0, "r")
	var invalid *Error
	if !errors.As(err, &invalid) || !strings.Contains(err.Error(), `"later" is not pre, main or post`) || !strings.Contains(err.Error(), "ConfigMap /a") {
		t.Fatalf("want an invalid-output error naming the object and the value, got %v", err)
	}
}

// Identifiers a program controls reach comments, alerts and the browser view: names, kinds and
// API versions Kubernetes would refuse are refused here, and the message quotes them escaped
// and cut (no newline, backtick run or bidirectional override gets through).
func TestParseRefusesHostileIdentifiers(t *testing.T) {
	obj := func(apiVersion, kind, name string) string {
		return fmt.Sprintf("apiVersion: %q\nkind: %q\nmetadata: {name: %q}\n", apiVersion, kind, name)
	}
	for name, in := range map[string]string{
		"markdown row":    obj("v1", "ConfigMap", "a` | changed | main |\n\n**Reviewed: no functional change.** <!--"),
		"html":            obj("v1", "ConfigMap", "</code></summary><a href=x>"),
		"newline":         obj("v1", "ConfigMap", "a\n+++ b/ConfigMap/x"),
		"bidi":            obj("v1", "ConfigMap", "abc\u202edef"),
		"space":           obj("v1", "ConfigMap", "a b"),
		"dot-dot":         obj("v1", "ConfigMap", ".."),
		"long":            obj("v1", "ConfigMap", strings.Repeat("a", 254)),
		"kind with space": obj("v1", "Config Map", "a"),
		"kind markup":     obj("v1", "<b>x</b>", "a"),
		"apiVersion":      obj("v1 | x", "ConfigMap", "a"),
		"namespace":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: \"a`b\"}\n",
	} {
		_, err := Parse([]byte(in), 0)
		var ie *Error
		if !errors.As(err, &ie) {
			t.Fatalf("%s: accepted (%v)", name, err)
		}
		for _, bad := range []string{"\n", "\u202e", "<!--", "`b`"} {
			if strings.Contains(err.Error(), bad) {
				t.Fatalf("%s: the message carries %q: %s", name, bad, err)
			}
		}
		if len(err.Error()) > 400 {
			t.Fatalf("%s: a message of %d characters", name, len(err.Error()))
		}
	}
	ok := obj("rbac.authorization.k8s.io/v1", "ClusterRole", "system:aggregate-to-admin") + "---\n" +
		obj("cert-manager.io/v1beta1", "Issuer", "le_prod.x-1") + "---\n" + obj("v1", "ServiceAccount", "user@example.com")
	if objs, err := Parse([]byte(ok), 0); err != nil || len(objs) != 3 {
		t.Fatalf("valid identifiers refused: %v", err)
	}
}
