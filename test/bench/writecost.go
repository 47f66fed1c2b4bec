package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// The write costs (after --compare's per-app pipeline) price each kind of write the KCL pipeline
// sends, on the KCLArtifacts and ExternalArtifacts that pipeline left, in kube-apiserver and etcd
// CPU per request: the bill of a phase is these prices times the writes per application. Each
// kind is sent once to each object, one object at a time per --parallel goroutine, with nothing
// else running; the KCLArtifacts' controller sees every event, as in a phase.

// writeCost is one kind of write and how to send it to the i-th object.
type writeCost struct {
	name string
	send func(b *bench, key types.NamespacedName, token string) error
}

var writeCosts = []writeCost{
	{"KCLArtifact status: merge patch of one field (a no-op reconcile's write)", func(b *bench, k types.NamespacedName, tok string) error {
		return b.c.Status().Patch(b.ctx, kclOf(k), rawMerge(`{"status":{"lastHandledReconcileAt":%q}}`, tok), client.FieldOwner("bench"))
	}},
	{"KCLArtifact status: the same, locked to the resourceVersion (a condition change's write)", func(b *bench, k types.NamespacedName, tok string) error {
		// the resourceVersion of the harness's watch, as the controller's comes from its cache
		var o kclv1.KCLArtifact
		if err := b.watched.Get(b.ctx, k, &o); err != nil {
			return err
		}
		p := fmt.Sprintf(`{"metadata":{"resourceVersion":%q},"status":{"lastHandledReconcileAt":%q}}`, o.ResourceVersion, tok)
		err := b.c.Status().Patch(b.ctx, kclOf(k), client.RawPatch(types.MergePatchType, []byte(p)), client.FieldOwner("bench"))
		if apierrors.IsConflict(err) {
			// the watch was behind: the unlocked write, which the table's requests column shows
			return b.c.Status().Patch(b.ctx, kclOf(k), rawMerge(`{"status":{"lastHandledReconcileAt":%q}}`, tok), client.FieldOwner("bench"))
		}
		return err
	}},
	{"KCLArtifact status: server-side apply of the same field", func(b *bench, k types.NamespacedName, tok string) error {
		p := fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"name":%q,"namespace":%q},"status":{"lastHandledReconcileAt":%q}}`,
			kclv1.GroupVersion.String(), kclv1.KCLArtifactKind, k.Name, k.Namespace, tok)
		return b.c.Status().Patch(b.ctx, kclOf(k), client.RawPatch(types.ApplyPatchType, []byte(p)), client.FieldOwner("bench-apply"), client.ForceOwnership)
	}},
	{"KCLArtifact metadata: merge patch of an annotation (a user's reconcile request)", func(b *bench, k types.NamespacedName, tok string) error {
		return b.c.Patch(b.ctx, kclOf(k), rawMerge(`{"metadata":{"annotations":{"bench.kcl.contrib.fluxcd.io/cost":%q}}}`, tok))
	}},
	{"ExternalArtifact status: merge patch of one field", func(b *bench, k types.NamespacedName, tok string) error {
		ea := &sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: k.Name, Namespace: k.Namespace}}
		return b.c.Status().Patch(b.ctx, ea, rawMerge(`{"status":{"artifact":{"metadata":{"bench":%q}}}}`, tok), client.FieldOwner("bench"))
	}},
	{"ExternalArtifact: create", func(b *bench, k types.NamespacedName, _ string) error {
		return b.c.Create(b.ctx, costArtifact(k, "create"), client.FieldOwner("bench"))
	}},
	{"ExternalArtifact: server-side apply of a new one (the same object)", func(b *bench, k types.NamespacedName, _ string) error {
		return b.c.Patch(b.ctx, costArtifact(k, "apply"), client.Apply, client.FieldOwner("bench"), client.ForceOwnership)
	}},
	{"ConfigMap of the KCLArtifact's size: merge patch of one field (a built-in kind, for scale)", func(b *bench, k types.NamespacedName, tok string) error {
		return b.c.Patch(b.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: k.Name + "-cost", Namespace: k.Namespace}},
			rawMerge(`{"data":{"token":%q}}`, tok))
	}},
}

// costArtifact is a new ExternalArtifact beside the KCLArtifact k, as the controller generates it.
func costArtifact(k types.NamespacedName, suffix string) *sourcev1.ExternalArtifact {
	ea := &sourcev1.ExternalArtifact{
		TypeMeta:   metav1.TypeMeta{APIVersion: sourcev1.GroupVersion.String(), Kind: sourcev1.ExternalArtifactKind},
		ObjectMeta: metav1.ObjectMeta{Name: k.Name + "-" + suffix, Namespace: k.Namespace, Labels: map[string]string{"bench": "cost"}},
	}
	ea.Spec.SourceRef = &meta.NamespacedObjectKindReference{APIVersion: kclv1.GroupVersion.String(), Kind: kclv1.KCLArtifactKind,
		Name: k.Name, Namespace: k.Namespace}
	return ea
}

func kclOf(k types.NamespacedName) *kclv1.KCLArtifact {
	return &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: k.Name, Namespace: k.Namespace}}
}

func rawMerge(format, token string) client.Patch {
	return client.RawPatch(types.MergePatchType, fmt.Appendf(nil, format, token))
}

// measureWriteCosts prices each write of writeCosts over the pipeline's KCLArtifacts, and
// returns the table.
func (b *bench) measureWriteCosts(p *pipeline) (string, error) {
	keys := p.units
	size, err := b.kclSize(keys[0])
	if err != nil {
		return "", err
	}
	if err := b.parallel(len(keys), func(i int) error { return b.sizedConfigMap(keys[i], size) }); err != nil {
		return "", err
	}
	b.settle("before the write costs")
	rows := [][]string{}
	for _, w := range writeCosts {
		token := strconv.FormatInt(time.Now().UnixNano(), 10)
		start := b.cmpMark()
		t0 := time.Now()
		if err := b.parallel(len(keys), func(i int) error { return w.send(b, keys[i], token) }); err != nil {
			return "", fmt.Errorf("%s: %w", w.name, err)
		}
		wall := time.Since(t0)
		b.settle("after " + w.name)
		end := b.cmpMark()
		per := func(c string) string {
			return fmt.Sprintf("%.2f ms", float64((end.cpu[c]-start.cpu[c]).Microseconds())/1000/float64(len(keys)))
		}
		rows = append(rows, []string{w.name, per("kube-apiserver"), per("etcd"), per("kcl-artifact-controller"),
			fmt.Sprintf("%.0f", (end.requests-start.requests)/float64(len(keys))), fmtDur(wall)})
		logf("   write cost / %s: kube-apiserver %s per write", w.name, rows[len(rows)-1][1])
	}
	intro := fmt.Sprintf("Write costs: each write sent once to each of %d KCLArtifacts (or their ExternalArtifacts, or ConfigMaps of "+
		"the same size), %d at a time; a KCLArtifact is %d bytes of JSON, managed fields included; CPU per write:", len(keys), b.cfg.parallel, size)
	return intro + "\n\n" + docsTable([]string{"write", "kube-apiserver", "etcd", "this controller (its watch)", "requests per write", "wall"}, rows, 1), nil
}

// kclSize is the size of a KCLArtifact as the API server stores it, managed fields included.
func (b *bench) kclSize(k types.NamespacedName) (int, error) {
	o := &kclv1.KCLArtifact{}
	if err := b.c.Get(b.ctx, k, o); err != nil {
		return 0, err
	}
	data, err := json.Marshal(o)
	return len(data), err
}

// sizedConfigMap creates a ConfigMap of about size bytes beside a KCLArtifact.
func (b *bench) sizedConfigMap(k types.NamespacedName, size int) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: k.Name + "-cost", Namespace: k.Namespace},
		Data: map[string]string{"filler": strings.Repeat("x", max(size-300, 1))}}
	return b.c.Create(b.ctx, cm)
}
