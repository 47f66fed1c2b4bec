// Package managedfields reads and rewrites the managed fields of the objects the controller
// generates, so that a change by anyone else can be put back and named. Server-side apply alone
// does not put it back: fields another manager set stay, since the apply does not own them.
// HandOver gives the fields other managers own under spec, labels and owner references to the
// controller's apply manager (earlier releases' update entries of its own manager become apply
// entries first), so that the apply that follows removes those it does not set and sets the
// others back. Drift names what changed and who changed it: field paths, never values, which may
// hold secrets.
package managedfields

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Drift says who changed what of a generated object: field paths (spec.patches,
// metadata.labels.<key>), never values, which may hold secrets.
type Drift struct {
	Paths, Managers []string
}

func (d *Drift) Add(other Drift) {
	d.Paths = sortedUnion(d.Paths, other.Paths)
	d.Managers = sortedUnion(d.Managers, other.Managers)
}

func (d Drift) Empty() bool { return len(d.Paths) == 0 }

// message is the event's text about object o (a kind and key).
func (d Drift) Message(o client.Object) string {
	by := "a write that left no field manager (a removal)"
	if len(d.Managers) > 0 {
		by = strings.Join(d.Managers, ", ")
	}
	return fmt.Sprintf("%s %s/%s changed by %s: %s; put back as the KCLArtifact generates it",
		kindOf(o), o.GetNamespace(), o.GetName(), by, strings.Join(d.Paths, ", "))
}

// kindOf is o's kind: objects are applied with their type meta set (setTypeMeta).
func kindOf(o client.Object) string {
	if k := o.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	return fmt.Sprintf("%T", o)
}

// Handover is the managed fields of a generated object once the controller's apply manager owns
// its spec, labels and owner references alone (entries nil when they are so already), and what
// other managers owned there.
type Handover struct {
	Entries []metav1.ManagedFieldsEntry
	Report  Drift
}

// HandOver computes the managed fields after the Handover, from those of the object, which
// migrate first.
func HandOver(entries []metav1.ManagedFieldsEntry, self, apiVersion string) (Handover, error) {
	var h Handover
	out, changed := migrate(entries, self)
	taken := map[string]any{}
	kept := out[:0]
	for _, e := range out {
		if e.Subresource != "" || (e.Manager == self && e.Operation == metav1.ManagedFieldsOperationApply) {
			kept = append(kept, e)
			continue
		}
		set, err := decodeFields(e.FieldsV1)
		if err != nil {
			return h, fmt.Errorf("managed fields of %s: %w", e.Manager, err)
		}
		t := takeSections(set)
		if len(t) == 0 {
			kept = append(kept, e)
			continue
		}
		changed = true
		mergeFields(taken, t)
		if e.Manager != self {
			h.Report.Add(Drift{Paths: describeFields(t), Managers: []string{e.Manager}})
		}
		if len(set) == 0 {
			continue // it owned nothing else
		}
		if e.FieldsV1, err = encodeFields(set); err != nil {
			return h, err
		}
		kept = append(kept, e)
	}
	if !changed {
		return h, nil
	}
	if len(taken) > 0 {
		if err := giveToApply(&kept, taken, self, apiVersion); err != nil {
			return h, err
		}
	}
	h.Entries = kept
	return h, nil
}

// migrate copies the managed fields, where, per subresource, the first update entry of the
// controller's own manager becomes an apply entry unless there is one (objects of earlier
// releases, written with CreateOrUpdate): a field dropped from the template is then removed by
// the next apply instead of staying behind, owned by nobody who would remove it.
func migrate(entries []metav1.ManagedFieldsEntry, self string) ([]metav1.ManagedFieldsEntry, bool) {
	applied := map[string]bool{}
	for _, e := range entries {
		if e.Manager == self && e.Operation == metav1.ManagedFieldsOperationApply {
			applied[e.Subresource] = true
		}
	}
	out := make([]metav1.ManagedFieldsEntry, 0, len(entries))
	changed := false
	for _, e := range entries {
		e = *e.DeepCopy()
		if e.Manager == self && e.Operation == metav1.ManagedFieldsOperationUpdate && !applied[e.Subresource] {
			applied[e.Subresource], e.Operation, changed = true, metav1.ManagedFieldsOperationApply, true
		}
		out = append(out, e)
	}
	return out, changed
}

// giveToApply adds the fields to the controller's apply entry of the object (not of a
// subresource), which it creates when there is none.
func giveToApply(entries *[]metav1.ManagedFieldsEntry, fields map[string]any, self, apiVersion string) error {
	i := slices.IndexFunc(*entries, func(e metav1.ManagedFieldsEntry) bool {
		return e.Manager == self && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == ""
	})
	if i < 0 {
		now := metav1.Now()
		*entries = append(*entries, metav1.ManagedFieldsEntry{Manager: self, Operation: metav1.ManagedFieldsOperationApply,
			APIVersion: apiVersion, Time: &now, FieldsType: "FieldsV1"})
		i = len(*entries) - 1
	}
	e := &(*entries)[i]
	mine, err := decodeFields(e.FieldsV1)
	if err != nil {
		return err
	}
	mergeFields(mine, fields)
	e.FieldsV1, err = encodeFields(mine)
	return err
}

func decodeFields(f *metav1.FieldsV1) (map[string]any, error) {
	set := map[string]any{}
	if f == nil || len(f.Raw) == 0 {
		return set, nil
	}
	return set, json.Unmarshal(f.Raw, &set)
}

func encodeFields(set map[string]any) (*metav1.FieldsV1, error) {
	b, err := json.Marshal(set)
	return &metav1.FieldsV1{Raw: b}, err
}

// takeSections removes from a field set the parts of a generated object that are the
// controller's alone (spec, labels, owner references) and returns them as a field set.
func takeSections(set map[string]any) map[string]any {
	taken := map[string]any{}
	if spec, ok := set["f:spec"]; ok {
		taken["f:spec"] = spec
		delete(set, "f:spec")
	}
	md, _ := set["f:metadata"].(map[string]any)
	for _, k := range []string{"f:labels", "f:ownerReferences"} {
		if v, ok := md[k]; ok {
			if taken["f:metadata"] == nil {
				taken["f:metadata"] = map[string]any{}
			}
			taken["f:metadata"].(map[string]any)[k] = v
			delete(md, k)
		}
	}
	if md != nil && len(md) == 0 {
		delete(set, "f:metadata")
	}
	return taken
}

// mergeFields adds the field set from to into.
func mergeFields(into, from map[string]any) {
	for k, v := range from {
		src, srcIsSet := v.(map[string]any)
		dst, dstIsSet := into[k].(map[string]any)
		if srcIsSet && dstIsSet {
			mergeFields(dst, src)
			continue
		}
		if _, ok := into[k]; !ok {
			into[k] = v
		}
	}
}

// describeFields names the fields of a set: spec.<field>, status.<field>,
// metadata.labels.<key>, metadata.ownerReferences.
func describeFields(set map[string]any) []string {
	var paths []string
	children := func(prefix string, node any) {
		m, ok := node.(map[string]any)
		if !ok {
			return
		}
		n := len(paths)
		for k := range m {
			if name, ok := strings.CutPrefix(k, "f:"); ok {
				paths = append(paths, prefix+"."+name)
			}
		}
		if len(paths) == n {
			paths = append(paths, prefix)
		}
	}
	children("spec", set["f:spec"])
	children("status", set["f:status"])
	md, _ := set["f:metadata"].(map[string]any)
	children("metadata.labels", md["f:labels"])
	if _, ok := md["f:ownerReferences"]; ok {
		paths = append(paths, "metadata.ownerReferences")
	}
	slices.Sort(paths)
	return paths
}

// ChangedPaths names what of live differs from desired, as describeFields does: the fields of
// the spec desired sets (live also has the API server's defaults), the labels and the owner
// references. It finds what a removal left no manager to own.
func ChangedPaths(desired, live client.Object) []string {
	var paths []string
	want, err1 := runtime.DefaultUnstructuredConverter.ToUnstructured(desired)
	got, err2 := runtime.DefaultUnstructuredConverter.ToUnstructured(live)
	if err1 == nil && err2 == nil {
		ws, _ := want["spec"].(map[string]any)
		gs, _ := got["spec"].(map[string]any)
		for k, v := range ws {
			if !equality.Semantic.DeepEqual(v, gs[k]) {
				paths = append(paths, "spec."+k)
			}
		}
	}
	for k := range maps.Keys(desired.GetLabels()) {
		if v, ok := live.GetLabels()[k]; !ok || v != desired.GetLabels()[k] {
			paths = append(paths, "metadata.labels."+k)
		}
	}
	for k := range maps.Keys(live.GetLabels()) {
		if _, ok := desired.GetLabels()[k]; !ok {
			paths = append(paths, "metadata.labels."+k)
		}
	}
	if !equality.Semantic.DeepEqual(desired.GetOwnerReferences(), live.GetOwnerReferences()) {
		paths = append(paths, "metadata.ownerReferences")
	}
	slices.Sort(paths)
	return paths
}

// StatusDrift is who else wrote the status of an object this controller alone writes (the
// ExternalArtifact's), and which fields.
func StatusDrift(entries []metav1.ManagedFieldsEntry, self string) Drift {
	var d Drift
	for _, e := range entries {
		if e.Subresource != "status" || e.Manager == self {
			continue
		}
		set, err := decodeFields(e.FieldsV1)
		if err != nil || set["f:status"] == nil {
			continue
		}
		d.Add(Drift{Paths: describeFields(map[string]any{"f:status": set["f:status"]}), Managers: []string{e.Manager}})
	}
	return d
}

func sortedUnion(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}
