package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// writes counts the reconciler's write requests per object ("*v1.Kustomization ns/name"), status
// writes apart ("… status").
var writes writeCounter

type writeCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (w *writeCounter) add(o client.Object, sub string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == nil {
		w.n = map[string]int{}
	}
	w.n[strings.TrimSpace(fmt.Sprintf("%s %s/%s %s", typeName(o), o.GetNamespace(), o.GetName(), sub))]++
}

// typeName is o's Go type, or the type it stands for when only its metadata is sent or read.
func typeName(o client.Object) string {
	if m, ok := o.(*metav1.PartialObjectMetadata); ok {
		gvk := m.GroupVersionKind()
		return "*" + gvk.Version + "." + gvk.Kind
	}
	return fmt.Sprintf("%T", o)
}

// in returns the counts of namespace ns.
func (w *writeCounter) in(ns string) map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for k, v := range w.n {
		if strings.Contains(k, " "+ns+"/") {
			out[k] = v
		}
	}
	return out
}

// since returns the counts of namespace ns that grew since before, by how much.
func (w *writeCounter) since(before map[string]int, ns string) map[string]int {
	out := w.in(ns)
	for k, v := range out {
		if v == before[k] {
			delete(out, k)
			continue
		}
		out[k] = v - before[k]
	}
	return out
}

// countingClient is the manager's client, counting writes.
type countingClient struct{ client.Client }

func (c countingClient) Create(ctx context.Context, o client.Object, opts ...client.CreateOption) error {
	writes.add(o, "")
	return c.Client.Create(ctx, o, opts...)
}

func (c countingClient) Update(ctx context.Context, o client.Object, opts ...client.UpdateOption) error {
	writes.add(o, "")
	return c.Client.Update(ctx, o, opts...)
}

func (c countingClient) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.PatchOption) error {
	writes.add(o, "")
	return c.Client.Patch(ctx, o, p, opts...)
}

func (c countingClient) Status() client.SubResourceWriter { return countingStatus{c.Client.Status()} }

type countingStatus struct{ client.SubResourceWriter }

func (s countingStatus) Update(ctx context.Context, o client.Object, opts ...client.SubResourceUpdateOption) error {
	writes.add(o, "status")
	return s.SubResourceWriter.Update(ctx, o, opts...)
}

func (s countingStatus) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	writes.add(o, "status")
	return s.SubResourceWriter.Patch(ctx, o, p, opts...)
}

// A reconciliation that finds nothing changed writes nothing but the handled request.
func TestNoOpReconcileWritesNothing(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	f.requestReconcile(obj) // the first one may still settle conditions
	before := writes.in(f.ns)
	f.requestReconcile(obj)
	f.requestReconcile(obj)
	after := writes.since(before, f.ns)
	// lastHandledReconcileAt, once per request
	f.g.Expect(after).To(Equal(map[string]int{"*v1alpha1.KCLArtifact " + f.ns + "/app status": 2}))
}

// A new source revision whose render is the artifact already published writes one status patch
// per KCLArtifact, which records that the revision was seen (sourceRevision, lastAttemptedRevision,
// inputDigest): without it nothing tells a user or CI that this revision was handled, and every
// restart renders it again. Nothing else: no ExternalArtifact write, so kustomize-controller has
// nothing to do, no Kustomization apply and no event. On a commit that changes one application
// of a hundred, this write is all the other ninety-nine cost the API server (docs/benchmarks.md#scale).
func TestUnchangedRenderWritesOnlyTheRevisionSeen(t *testing.T) {
	f := newFixture(t)
	obj, rev := appliedApp(f)
	digest := obj.Status.Artifact.Digest
	before := writes.in(f.ns)
	events := f.eventText()

	f.commit("bbb", map[string]string{"main.k": program, "README.md": "another application changed"})
	obj = f.waitRevision(obj, "bbb")
	f.g.Expect(obj.Status.SourceRevision).To(Equal("main@sha1:bbb"))
	f.g.Expect(obj.Status.Artifact.Digest).To(Equal(digest))
	f.g.Expect(obj.Status.Artifact.Revision).To(Equal(rev), "the ExternalArtifact keeps the revision kustomize-controller applied")

	after := writes.since(before, f.ns)
	f.g.Expect(after).To(Equal(map[string]int{"*v1alpha1.KCLArtifact " + f.ns + "/app status": 1}))
	f.g.Expect(f.eventText()).To(Equal(events), "no event for an unchanged artifact")
}

// KCLArtifacts of one namespace with the same inputs render once; another namespace renders
// its own.
func TestIdenticalInputsRenderOncePerNamespace(t *testing.T) {
	same := func(s *kclv1.KCLArtifactSpec) {
		s.Arguments = map[string]string{"env": "shared"}
		s.Kustomization = &kclv1.KustomizationTemplate{Disabled: true}
	}
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	before := renders.Load()
	a, b := f.create("a", same), f.create("b", same)
	f.waitReady(a)
	f.waitReady(b)
	f.g.Expect(renders.Load() - before).To(Equal(int64(1)))
	f.g.Expect(b.Status.Artifact.Digest).To(Equal(a.Status.Artifact.Digest))
	f.g.Expect(b.Status.Artifact.URL).NotTo(Equal(a.Status.Artifact.URL), "each KCLArtifact stores its own artifact")

	other := newFixture(t)
	other.commit("aaa", map[string]string{"main.k": program})
	other.waitReady(other.create("a", same))
	f.g.Expect(renders.Load()-before).To(Equal(int64(2)), "another namespace reused a render")
}

// kustomize-controller's progress reports are not mirrored (one status write of the KCLArtifact
// each): the outcome still is, a failure and the recovery from it.
func TestKustomizeProgressWritesNothing(t *testing.T) {
	f := newFixture(t)
	obj, rev := appliedApp(f)
	status := "*v1alpha1.KCLArtifact " + f.ns + "/app status"
	before := writes.in(f.ns)[status]

	playKustomizeProgress(f, "app")
	playKustomizeFailure(f, "app", rev, meta.HealthCheckFailedReason, "health check failed")
	waitKustomizationReady(f, obj, metav1.ConditionFalse, meta.HealthCheckFailedReason)
	f.g.Expect(writes.in(f.ns)[status]-before).To(Equal(1), "one status write: the failure")

	playKustomizeProgress(f, "app")
	playKustomizeController(f, "app", rev)
	waitKustomizationReady(f, obj, metav1.ConditionTrue, meta.ReconciliationSucceededReason)
	f.g.Expect(conditions.GetMessage(obj, kclv1.KustomizationReadyCondition)).To(Equal(appliedMessage), "the revision is status.artifact.revision, "+rev)
}

// playKustomizeProgress is kustomize-controller starting a reconcile and reporting its steps.
func playKustomizeProgress(f *fixture, name string) {
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}
	for _, step := range []string{"Fetching manifests", "Building manifests", "Detecting drift"} {
		f.g.Eventually(func() error {
			f.get(ks)
			conditions.MarkUnknown(ks, meta.ReadyCondition, meta.ProgressingReason, "Reconciliation in progress")
			conditions.MarkReconciling(ks, meta.ProgressingReason, "%s", step)
			return k8sClient.Status().Update(f.ctx, ks)
		}, timeout, interval).Should(Succeed())
	}
}
