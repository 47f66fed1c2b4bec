// Package manifests turns a rendered YAML stream into Kubernetes objects, refusing anything that
// is not one, and writes them where kustomize-controller will find them.
package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// FileName is the file the objects are written to inside the artifact.
const FileName = "manifests.yaml"

// Error is rendered output that is not a set of Kubernetes objects.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func invalid(format string, args ...any) error { return &Error{Msg: fmt.Sprintf(format, args...)} }

// TooManyObjectsError is an output with more objects than the bound.
type TooManyObjectsError struct{ Max int }

func (e *TooManyObjectsError) Error() string {
	return fmt.Sprintf("the output has more than %d objects (--kcl-max-objects)", e.Max)
}

// Parse reads a YAML stream of at most maxObjects objects (0: no bound). Accepted: a stream of
// objects, one object, or documents whose `items` is a list of objects (a List, or a KCL
// program's top-level `items = [...]`).
func Parse(stream []byte, maxObjects int) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	err := each(bytes.NewReader(stream), maxObjects, func(o *unstructured.Unstructured) error {
		objs = append(objs, o)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return objs, nil
}

// each calls fn with every object of the stream, refusing duplicates and more than maxObjects.
func each(r io.Reader, maxObjects int, fn func(*unstructured.Unstructured) error) error {
	dec := utilyaml.NewYAMLReader(bufio.NewReader(r))
	seen := map[kclv1.ObjectReference]bool{}
	count := 0
	for n := 1; ; n++ {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return invalid("document %d is not valid YAML: %v", n, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		got, err := documentObjects(n, doc)
		if err != nil {
			return err
		}
		for _, o := range got {
			if count++; maxObjects > 0 && count > maxObjects {
				return &TooManyObjectsError{Max: maxObjects}
			}
			if err := unique(seen, o); err != nil {
				return err
			}
			if err := fn(o); err != nil {
				return err
			}
		}
	}
}

func documentObjects(n int, doc []byte) ([]*unstructured.Unstructured, error) {
	var m map[string]any
	if err := yaml.Unmarshal(doc, &m); err != nil {
		return nil, invalid("document %d is not a mapping: %v", n, err)
	}
	if m == nil {
		return nil, nil
	}
	if items, ok := m["items"]; ok && (m["kind"] == nil || isListKind(m["kind"])) {
		list, ok := items.([]any)
		if !ok {
			return nil, invalid("document %d: items is not a list", n)
		}
		var objs []*unstructured.Unstructured
		for i, it := range list {
			im, ok := it.(map[string]any)
			if !ok {
				return nil, invalid("document %d, item %d is not a mapping", n, i)
			}
			o, err := object(fmt.Sprintf("document %d, item %d", n, i), im)
			if err != nil {
				return nil, err
			}
			objs = append(objs, o)
		}
		return objs, nil
	}
	o, err := object(fmt.Sprintf("document %d", n), m)
	if err != nil {
		return nil, err
	}
	return []*unstructured.Unstructured{o}, nil
}

func isListKind(k any) bool {
	s, _ := k.(string)
	return s == "List" || (len(s) > 4 && s[len(s)-4:] == "List")
}

func object(where string, m map[string]any) (*unstructured.Unstructured, error) {
	o := &unstructured.Unstructured{Object: m}
	apiVersion, _ := m["apiVersion"].(string)
	kind, _ := m["kind"].(string)
	if apiVersion == "" || kind == "" {
		return nil, invalid("%s is not a Kubernetes object: it needs apiVersion and kind (top-level keys: %s)", where, keys(m))
	}
	if !apiVersionRE.MatchString(apiVersion) || !kindRE.MatchString(kind) {
		return nil, invalid("%s has an invalid apiVersion %s or kind %s", where, shown(apiVersion), shown(kind))
	}
	md, _ := m["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	if name == "" {
		return nil, invalid("%s (%s %s) has no metadata.name", where, apiVersion, kind)
	}
	if len(name) > 253 || !nameRE.MatchString(name) || name == "." || name == ".." {
		return nil, invalid("%s (%s %s) has an invalid metadata.name %s: letters, digits, '.', '-', '_', ':' and '@' only",
			where, apiVersion, kind, shown(name))
	}
	if ns, ok := md["namespace"]; ok {
		s, isStr := ns.(string)
		if !isStr || len(validation.IsDNS1123Label(s)) > 0 {
			return nil, invalid("%s (%s %s) has an invalid metadata.namespace %s", where, kind, name, shown(fmt.Sprint(ns)))
		}
	}
	return o, nil
}

// Object identifiers are refused unless Kubernetes could accept them: they reach the inventory,
// diffs, pull-request comments, the browser view and events, where a name holding a newline, a
// backtick, a '|' or markup would speak for the program. The name rule is the loosest Kubernetes
// applies to common kinds (RBAC names hold ':' and '@'), without what it lets through elsewhere.
var (
	apiVersionRE = regexp.MustCompile(`^(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?v[0-9]+(?:(?:alpha|beta)[0-9]+)?$`)
	kindRE       = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]{0,62}$`)
	nameRE       = regexp.MustCompile(`^[A-Za-z0-9._:@-]+$`)
)

// shown quotes a program's string for a message, cut to 64 characters, every character but
// letters, digits, spaces and ".-_:@/" replaced by '?': a message reaches alerts and comments
// that read markup, and must say what is wrong without speaking for the program.
func shown(s string) string {
	cut := ""
	if len(s) > 64 {
		s, cut = s[:64], "..."
	}
	safe := strings.Map(func(r rune) rune {
		if r < 128 && (r == ' ' || strings.ContainsRune(".-_:@/", r) || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return r
		}
		return '?'
	}, s)
	return `"` + safe + `"` + cut
}

func keys(m map[string]any) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	if len(ks) > 8 {
		ks = append(ks[:8], "...")
	}
	return fmt.Sprint(ks)
}

// unique refuses an object already seen: kustomize-controller would apply only one of them.
func unique(seen map[kclv1.ObjectReference]bool, o *unstructured.Unstructured) error {
	ref := Reference(o)
	ref.APIVersion = o.GroupVersionKind().Group
	if seen[ref] {
		return invalid("%s %s/%s is rendered twice", o.GetKind(), o.GetNamespace(), o.GetName())
	}
	seen[ref] = true
	return nil
}

// Reference identifies an object in the inventory.
func Reference(o *unstructured.Unstructured) kclv1.ObjectReference {
	return kclv1.ObjectReference{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName()}
}

// MaxInventory bounds status.inventory, so that a KCLArtifact stays far below etcd's object size
// limit whatever its output; status.inventoryCount has the full count.
const MaxInventory = 1000

// Inventory returns references to the objects, sorted, at most MaxInventory of them.
func Inventory(objs []*unstructured.Unstructured) []kclv1.ObjectReference {
	refs := make([]kclv1.ObjectReference, 0, len(objs))
	for _, o := range objs {
		refs = append(refs, Reference(o))
	}
	return InventoryOf(refs)
}

// InventoryOf sorts references and keeps at most MaxInventory of them.
func InventoryOf(refs []kclv1.ObjectReference) []kclv1.ObjectReference {
	inv := slices.Clone(refs)
	sort.Slice(inv, func(i, j int) bool {
		a, b := inv[i], inv[j]
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	if len(inv) > MaxInventory {
		inv = inv[:MaxInventory]
	}
	return inv
}
