package controller

import (
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// A new source revision costs one status write on the KCLArtifact and one on its
// ExternalArtifact: the status and its conditions travel together.
func TestNewRevisionIsOneStatusWrite(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	f.requestReconcile(obj) // settles the EA's conditions and the first status
	before := writes.in(f.ns)
	f.commit("bbb", map[string]string{"main.k": program + "\n_x = 1\n[{apiVersion = \"v1\", kind = \"ConfigMap\", metadata.name = \"two\"}]\n"})
	f.waitRevision(obj, "bbb")
	f.g.Expect(conditions.IsReady(obj)).To(BeTrue())
	f.g.Expect(obj.Status.SourceRevision).To(Equal("main@sha1:bbb"))
	after := writes.in(f.ns)
	key := "*v1alpha1.KCLArtifact " + f.ns + "/app status"
	f.g.Expect(after[key] - before[key]).To(Equal(1))
	eaKey := "*v1.ExternalArtifact " + f.ns + "/app status"
	f.g.Expect(after[eaKey] - before[eaKey]).To(Equal(1))
}

// A writer that changed the object since it was read (another controller adding its own
// condition, or an owned condition out of date) does not lose its condition to ours, and ours
// still wins on the conditions this controller owns.
func TestStatusPatchMergesConditionsOnConflict(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.suspended(f.create("app", func(s *kclv1.KCLArtifactSpec) { s.Suspend = true }))

	read := obj.DeepCopy()
	p := newStatusPatcher(read, k8sClient, "test", ownedConditions)

	other := obj.DeepCopy()
	conditions.MarkTrue(other, "Audited", "ByOthers", "someone else's condition")
	conditions.MarkFalse(other, meta.ReadyCondition, "Outdated", "an owned condition written elsewhere")
	f.g.Expect(k8sClient.Status().Update(f.ctx, other)).To(Succeed())

	conditions.MarkTrue(read, meta.ReadyCondition, meta.SucceededReason, "ours")
	read.Status.SourceRevision = "main@sha1:ours"
	f.g.Expect(p.Patch(f.ctx, read)).To(Succeed())

	got := &kclv1.KCLArtifact{}
	f.g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
	f.g.Expect(conditions.Get(got, "Audited")).NotTo(BeNil(), "the other writer's condition was dropped")
	f.g.Expect(conditions.GetMessage(got, meta.ReadyCondition)).To(Equal("ours"))
	f.g.Expect(got.Status.SourceRevision).To(Equal("main@sha1:ours"))
	f.g.Expect(read.ResourceVersion).To(Equal(got.ResourceVersion), "the patcher's object follows the server")
	f.g.Expect(metav1.FindStatusCondition(read.Status.Conditions, "Audited")).NotTo(BeNil())
}

// Nothing changed, nothing sent; a finalizer alone is a metadata patch, not a status write.
func TestStatusPatcherWritesOnlyWhatChanged(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.suspended(f.create("app", func(s *kclv1.KCLArtifactSpec) { s.Suspend = true }))
	c := countingClient{k8sClient}
	p := newStatusPatcher(obj, c, "test", ownedConditions)
	before := writes.in(f.ns)
	f.g.Expect(p.Patch(f.ctx, obj)).To(Succeed())
	f.g.Expect(writes.in(f.ns)).To(Equal(before))

	obj.Finalizers = append(obj.Finalizers, "example.com/test")
	f.g.Expect(p.Patch(f.ctx, obj)).To(Succeed())
	after := writes.in(f.ns)
	f.g.Expect(after["*v1alpha1.KCLArtifact "+f.ns+"/app"] - before["*v1alpha1.KCLArtifact "+f.ns+"/app"]).To(Equal(1))
	f.g.Expect(after["*v1alpha1.KCLArtifact "+f.ns+"/app status"]).To(Equal(before["*v1alpha1.KCLArtifact "+f.ns+"/app status"]))

	obj.Status.LastHandledReconcileAt = time.Now().Format(time.RFC3339Nano)
	f.g.Expect(p.Patch(f.ctx, obj)).To(Succeed(), "the resourceVersion followed the metadata patch")
	got := &kclv1.KCLArtifact{}
	f.g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
	f.g.Expect(got.Finalizers).To(ContainElement("example.com/test"))
	f.g.Expect(got.Status.LastHandledReconcileAt).To(Equal(obj.Status.LastHandledReconcileAt))
	got.Finalizers = obj.Finalizers[:len(obj.Finalizers)-1]
	f.g.Expect(k8sClient.Update(f.ctx, got)).To(Succeed())
}

// suspended waits until the reconciler has added its finalizer to a suspended KCLArtifact and
// written its status, so that it leaves the object alone from then on.
func (f *fixture) suspended(obj *kclv1.KCLArtifact) *kclv1.KCLArtifact {
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Finalizers).To(ContainElement(kclv1.Finalizer))
		g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
	}, timeout, interval).Should(Succeed())
	return obj
}
