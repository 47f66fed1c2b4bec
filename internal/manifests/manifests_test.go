package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
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
	refs, err := Stream(strings.NewReader(in), &b, 0)
	if err != nil {
		t.Fatal(err)
	}
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
