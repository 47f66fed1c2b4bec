// Package yamldiff compares two sets of rendered Kubernetes objects the way a reviewer reads a
// change: object by object (added, removed, changed), each as a unified diff of its YAML with
// sorted keys, so that reordering objects or keys is not a change. Secret values are masked
// unless asked otherwise: keys show, values and their changes do not.
package yamldiff

import (
	"fmt"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
)

// Options tune a diff.
type Options struct {
	// ShowSecrets shows the values of Secrets instead of masking them.
	ShowSecrets bool
	// Context is the number of unchanged lines around a change (3 when 0).
	Context int
	// Unlisted leaves Object.Unified empty, for a caller that wants only what changed: objects
	// are then compared as values, without writing their YAML (most of a diff's cost).
	Unlisted bool
	// Sensitive are values that came from Secrets (a KCLArtifact's argumentsFrom): masked
	// wherever a program put them, in any object, unless ShowSecrets.
	Sensitive []string
}

// Op is what happened to an object.
type Op string

// What happened to an object between two sets.
const (
	Added   Op = "added"
	Removed Op = "removed"
	Changed Op = "changed"
)

// Object is one object that differs.
type Object struct {
	Op                    Op
	Kind, Namespace, Name string
	// Phase is the object's deploy phase when it is not main on either side: "pre", "post", or
	// "pre -> main" for an object that moved.
	Phase string
	// Unified is the unified diff of the object's YAML, headers included.
	Unified string
}

// ID names the object as the diff headers do: kind/namespace/name (kind/name without namespace).
func (o Object) ID() string { return ID(o.Kind, o.Namespace, o.Name) }

// Result is a comparison: the objects that differ, sorted by kind, namespace and name.
type Result struct {
	Objects   []Object
	Unchanged int
}

// Counts says how many objects were added, removed and changed.
func (r Result) Counts() (added, removed, changed int) {
	for _, o := range r.Objects {
		switch o.Op {
		case Added:
			added++
		case Removed:
			removed++
		default:
			changed++
		}
	}
	return added, removed, changed
}

// Summary is one line: `2 added, 1 removed, 3 changed, 10 unchanged`.
func (r Result) Summary() string {
	a, d, c := r.Counts()
	return fmt.Sprintf("%d added, %d removed, %d changed, %d unchanged", a, d, c, r.Unchanged)
}

// String is the whole diff: the summary, then every object's unified diff.
func (r Result) String() string {
	var b strings.Builder
	b.WriteString("# " + r.Summary() + "\n")
	for _, o := range r.Objects {
		b.WriteString(o.Unified)
	}
	return b.String()
}

// Diff compares two YAML streams of objects.
func Diff(from, to []byte, o Options) (Result, error) {
	a, err := parse(from)
	if err != nil {
		return Result{}, fmt.Errorf("the older objects: %w", err)
	}
	b, err := parse(to)
	if err != nil {
		return Result{}, fmt.Errorf("the newer objects: %w", err)
	}
	return Objects(a, b, o)
}

// Objects compares two sets of objects.
func Objects(from, to []*unstructured.Unstructured, o Options) (Result, error) {
	if o.Context <= 0 {
		o.Context = 3
	}
	a, b := byID(from), byID(to)
	sensitive := sensitiveForms(o.Sensitive)
	var r Result
	for _, key := range unionKeys(a, b) {
		x, y := a[key], b[key]
		if o.Unlisted {
			if x != nil && y != nil && equality.Semantic.DeepEqual(x.Object, y.Object) {
				r.Unchanged++
			} else {
				d := object(x, y)
				if !o.ShowSecrets {
					// unlisted, an object shows only its identity: a name can hold a value too
					d.Kind, d.Namespace, d.Name = maskString(d.Kind, sensitive), maskString(d.Namespace, sensitive), maskString(d.Name, sensitive)
				}
				r.Objects = append(r.Objects, d)
			}
			continue
		}
		if !o.ShowSecrets {
			x, y = maskPair(x, y)
			x, y = maskValues(x, sensitive), maskValues(y, sensitive)
		}
		ox, err := toYAML(x)
		if err != nil {
			return Result{}, err
		}
		oy, err := toYAML(y)
		if err != nil {
			return Result{}, err
		}
		if x != nil && y != nil && ox == oy {
			r.Unchanged++
			continue
		}
		d := object(x, y)
		d.Unified = unified(d, x, y, ox, oy, o.Context)
		r.Objects = append(r.Objects, d)
	}
	return r, nil
}

// object is what happened to an object present in x, y or both, without its diff.
func object(x, y *unstructured.Unstructured) Object {
	obj, op := y, Changed
	switch {
	case x == nil:
		op = Added
	case y == nil:
		obj, op = x, Removed
	}
	d := Object{Op: op, Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
	_, _, d.Phase = phaseLabels(x, y)
	return d
}

// unified is the diff of an object's YAML, ox and oy, with its headers.
func unified(d Object, x, y *unstructured.Unstructured, ox, oy string, context int) string {
	from, to := "a/"+d.ID(), "b/"+d.ID()
	if d.Op == Added {
		from = "/dev/null"
	}
	if d.Op == Removed {
		to = "/dev/null"
	}
	// the phase goes where a unified diff has the file's date, after a tab: patch tools ignore it
	fromPhase, toPhase, _ := phaseLabels(x, y)
	text, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: splitLines(ox), B: splitLines(oy), FromFile: from, ToFile: to, Context: context,
		FromDate: fromPhase, ToDate: toPhase,
	})
	return text
}

// splitLines splits a YAML document into lines; an absent object has none (difflib would
// make it one empty line, shown as a line of context).
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return difflib.SplitLines(s)
}

// phaseLabels are the header labels of the two sides ("phase pre") and the object's phase, all
// empty for an object in main on both sides.
func phaseLabels(x, y *unstructured.Unstructured) (from, to, phase string) {
	px, py := phaseOf(x), phaseOf(y)
	if px == phases.Main && py == phases.Main {
		return "", "", ""
	}
	if x != nil {
		from = "phase " + string(px)
	}
	if y != nil {
		to = "phase " + string(py)
	}
	switch {
	case x == nil || px == py:
		return from, to, string(py)
	case y == nil:
		return from, to, string(px)
	}
	return from, to, string(px) + " -> " + string(py)
}

func phaseOf(o *unstructured.Unstructured) phases.Phase {
	if o == nil {
		return phases.Main
	}
	return manifests.PhaseOf(o)
}

func parse(stream []byte) ([]*unstructured.Unstructured, error) {
	return manifests.Parse(stream, 0)
}

// key identifies an object across versions of its API: group, kind, namespace, name.
func key(o *unstructured.Unstructured) string {
	gv := o.GroupVersionKind()
	return gv.Group + "/" + ID(o.GetKind(), o.GetNamespace(), o.GetName())
}

// ID names an object as the diff headers do: kind/namespace/name, kind/name without namespace.
func ID(kind, ns, name string) string {
	if ns == "" {
		return kind + "/" + name
	}
	return kind + "/" + ns + "/" + name
}

func byID(objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	m := make(map[string]*unstructured.Unstructured, len(objs))
	for _, o := range objs {
		m[key(o)] = o
	}
	return m
}

func unionKeys(a, b map[string]*unstructured.Unstructured) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// toYAML is the object's YAML with sorted keys ("" for none).
func toYAML(o *unstructured.Unstructured) (string, error) {
	if o == nil {
		return "", nil
	}
	b, err := yaml.Marshal(o.Object)
	return string(b), err
}
