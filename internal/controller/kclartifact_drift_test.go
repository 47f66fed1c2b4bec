package controller

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// driftTimeout is how long a generated object may stay changed by someone else: the watch queues
// the KCLArtifact at once, and nothing is rendered.
const driftTimeout = 10 * time.Second

// attacker is the field manager the namespace editor writes with.
const attacker = "mallory-editor"

// grantFluxEdit binds user to what Flux's stock flux-edit role gives a namespace editor on the
// objects this controller generates: write Kustomizations and ExternalArtifacts, status included.
func grantFluxEdit(f *fixture, user string) {
	f.t.Helper()
	verbs := []string{"get", "list", "watch", "patch", "update"}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "flux-edit", Namespace: f.ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{kustomizev1.GroupVersion.Group}, Resources: []string{"kustomizations"}, Verbs: verbs},
		{APIGroups: []string{sourcev1.GroupVersion.Group}, Resources: []string{"externalartifacts", "externalartifacts/status"}, Verbs: verbs},
	}}
	f.g.Expect(k8sClient.Create(f.ctx, role)).To(Succeed())
	f.g.Expect(k8sClient.Create(f.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "flux-edit", Namespace: f.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})).To(Succeed())
}

// drift is one change of a generated object by its namespace's editor: the path the event must
// name, the merge patch, and the value it sets, which no event may show.
type drift struct {
	path, patch, value string
}

// The generated Kustomization and ExternalArtifact are the controller's: whatever a namespace
// editor changes of their spec, labels, owner references (or the ExternalArtifact's status) is
// put back within seconds, and a Warning event names the fields and the field manager, not the
// values. A reconcile that finds nothing changed writes nothing more than before.
func TestDriftOfGeneratedObjectsIsReverted(t *testing.T) {
	f := newFixture(t)
	obj, _ := appliedApp(f)
	grantFluxEdit(f, "mallory")
	mallory := as(f, "mallory")

	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}
	want := f.get(ks.DeepCopy()).(*kustomizev1.Kustomization)
	holder := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mallory", Namespace: f.ns}}
	f.g.Expect(k8sClient.Create(f.ctx, holder)).To(Succeed())
	owners, err := json.Marshal(append(want.OwnerReferences, metav1.OwnerReference{
		APIVersion: "v1", Kind: "ConfigMap", Name: holder.Name, UID: holder.UID}))
	f.g.Expect(err).NotTo(HaveOccurred())

	for _, d := range []drift{
		{"spec.patches", `{"spec":{"patches":[{"patch":"- op: add\n  path: /data/owned\n  value: by-mallory","target":{"kind":"ConfigMap"}}]}}`, "by-mallory"},
		{"spec.path", `{"spec":{"path":"./elsewhere"}}`, "elsewhere"},
		{"spec.targetNamespace", `{"spec":{"targetNamespace":"kube-system"}}`, "kube-system"},
		{"spec.serviceAccountName", `{"spec":{"serviceAccountName":"cluster-admin"}}`, "cluster-admin"},
		{"spec.suspend", `{"spec":{"suspend":true}}`, "true"},
		{"spec.prune", `{"spec":{"prune":false}}`, "false"},
		{"metadata.labels.sharding.fluxcd.io/key", `{"metadata":{"labels":{"sharding.fluxcd.io/key":"shard-of-mine"}}}`, "shard-of-mine"},
		{"metadata.ownerReferences", `{"metadata":{"ownerReferences":` + string(owners) + `}}`, string(holder.UID)},
	} {
		expectPutBack(f, mallory, obj, "Kustomization", ks, want, d, func(k *kustomizev1.Kustomization) any { return k.Spec })
	}

	ea := &sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}
	wantEA := f.get(ea.DeepCopy()).(*sourcev1.ExternalArtifact)
	for _, d := range []drift{
		{"spec.sourceRef", `{"spec":{"sourceRef":{"name":"impostor"}}}`, "impostor"},
		{"metadata.labels.sharding.fluxcd.io/key", `{"metadata":{"labels":{"sharding.fluxcd.io/key":"shard-of-mine"}}}`, "shard-of-mine"},
	} {
		expectPutBack(f, mallory, obj, "ExternalArtifact", ea, wantEA, d, func(e *sourcev1.ExternalArtifact) any { return e.Spec })
	}

	// the artifact pointing elsewhere: nothing in the ExternalArtifact's metadata changes, and the
	// controller does not cache its status
	elsewhere := drift{"status.artifact", `{"status":{"artifact":{"url":"http://evil.example/a.tar.gz"}}}`, "evil.example"}
	f.g.Expect(mallory.Status().Patch(f.ctx, ea.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(elsewhere.patch)),
		&client.SubResourcePatchOptions{PatchOptions: client.PatchOptions{FieldManager: attacker}})).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		live := &sourcev1.ExternalArtifact{}
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(ea), live)).To(Succeed())
		g.Expect(live.Status.Artifact).To(Equal(obj.Status.Artifact))
	}, driftTimeout, interval).Should(Succeed(), "the artifact URL was not put back")
	expectDriftEvent(f, obj, "ExternalArtifact "+f.ns+"/app", elsewhere)

	// nothing drifted: a reconcile writes the handled request and reads no generated object
	f.requestReconcile(obj)
	before, reads := writes.in(f.ns), apiReads.in(f.ns)
	f.requestReconcile(obj)
	f.requestReconcile(obj)
	f.g.Expect(writes.since(before, f.ns)).To(Equal(map[string]int{"*v1alpha1.KCLArtifact " + f.ns + "/app status": 2}))
	for key := range apiReads.since(reads, f.ns) {
		f.g.Expect(key).NotTo(Or(HavePrefix("*v1.Kustomization"), HavePrefix("*v1.ExternalArtifact")), "read around the cache")
	}
}

// `flux suspend kustomization` on a generated Kustomization is drift like any other change:
// suspending is spec.kustomization.suspend's, and what the template says wins either way.
func TestDriftSuspendFollowsTheTemplate(t *testing.T) {
	f := newFixture(t)
	obj, _ := appliedApp(f)
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}
	suspended := func(g Gomega) bool {
		live := &kustomizev1.Kustomization{}
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(ks), live)).To(Succeed())
		return live.Spec.Suspend
	}

	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Kustomization = &kclv1.KustomizationTemplate{Suspend: true} })
	f.g.Eventually(suspended, timeout, interval).Should(BeTrue(), "the template suspends")

	// flux resume kustomization, as the flux CLI patches it
	f.g.Expect(k8sClient.Patch(f.ctx, ks.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`)),
		client.FieldOwner("flux-client-side-apply"))).To(Succeed())
	f.g.Eventually(suspended, driftTimeout, interval).Should(BeTrue(), "a resume by hand stays")
	expectDriftEvent(f, obj, "Kustomization "+f.ns+"/app", drift{path: "spec.suspend", value: "false"}, "flux-client-side-apply")

	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Kustomization.Suspend = false })
	f.g.Eventually(suspended, timeout, interval).Should(BeFalse(), "the template resumes")
}

// expectDriftEvent waits for the Warning event of d reverted on the object named, which names the
// field manager (attacker unless given) and the path, and not the value set.
// expectPutBack has the namespace's editor apply drift d to the generated object o of kind, and waits
// until its spec, labels and owner references are want's again and an event names the drift.
func expectPutBack[T client.Object](f *fixture, editor client.Client, obj *kclv1.KCLArtifact, kind string, o, want T, d drift, spec func(T) any) {
	f.t.Helper()
	f.g.Expect(editor.Patch(f.ctx, o.DeepCopyObject().(client.Object), client.RawPatch(types.MergePatchType, []byte(d.patch)),
		client.FieldOwner(attacker))).To(Succeed(), d.path)
	f.g.Eventually(func(g Gomega) {
		live := o.DeepCopyObject().(T)
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(o), live)).To(Succeed())
		g.Expect(spec(live)).To(Equal(spec(want)))
		g.Expect(live.GetLabels()).To(Equal(want.GetLabels()))
		g.Expect(live.GetOwnerReferences()).To(Equal(want.GetOwnerReferences()))
	}, driftTimeout, interval).Should(Succeed(), "%s was not put back", d.path)
	expectDriftEvent(f, obj, kind+" "+f.ns+"/"+o.GetName(), d)
}

func expectDriftEvent(f *fixture, obj *kclv1.KCLArtifact, object string, d drift, manager ...string) {
	f.t.Helper()
	by := attacker
	if len(manager) > 0 {
		by = manager[0]
	}
	var found string
	f.g.Eventually(func() bool {
		for _, e := range eventsReceiver.of(obj) {
			if e.Reason == kclv1.DriftRevertedReason && e.Severity == "error" && strings.Contains(e.Message, object) &&
				strings.Contains(e.Message, d.path) && strings.Contains(e.Message, by) {
				found = e.Message
				return true
			}
		}
		return false
	}, driftTimeout, interval).Should(BeTrue(), "no %s event names %s of %s and %s", kclv1.DriftRevertedReason, d.path, object, by)
	f.t.Log(found)
	if d.value != "true" && d.value != "false" {
		f.g.Expect(found).NotTo(ContainSubstring(d.value), "the event shows the value set")
	}
}

// The managed fields are written as they were read or not at all: kustomize-controller's status
// writes change them too, and a write over a newer object would drop what it recorded.
func TestDriftHandOverIsLockedToTheResourceVersionRead(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	f.waitReady(f.create("app", nil))
	r := &KCLArtifactReconciler{Client: k8sClient, ControllerName: "kcl-artifact-controller"}
	stale := generatedKustomization(f, "app")
	playKustomizeController(f, "app", "anything")

	err := r.writeManagedFields(f.ctx, stale.DeepCopy(), stale.ManagedFields)
	f.g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "a write over a newer object: %v", err)
	fresh := generatedKustomization(f, "app")
	f.g.Expect(r.writeManagedFields(f.ctx, fresh, fresh.ManagedFields)).To(Succeed())
}

// A render that fails publishes nothing new, and must not leave drift standing: an editor who
// breaks the render (an argument's ConfigMap deleted) and then patches the Kustomization has the
// patch put back all the same, while the last good artifact stays applied.
func TestDriftIsRevertedWhileTheRenderFails(t *testing.T) {
	f := newFixture(t)
	obj, _ := appliedApp(f)
	grantFluxEdit(f, "mallory")
	ks := generatedKustomization(f, "app")
	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Path = "missing" })
	f.waitFor(obj, metav1.ConditionFalse, kclv1.RenderFailedReason)

	d := drift{"spec.patches", `{"spec":{"patches":[{"patch":"- op: add\n  path: /data/owned\n  value: by-mallory","target":{"kind":"ConfigMap"}}]}}`, "by-mallory"}
	f.g.Expect(as(f, "mallory").Patch(f.ctx, ks.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(d.patch)),
		client.FieldOwner(attacker))).To(Succeed())
	f.g.Eventually(func(g Gomega) {
		live := &kustomizev1.Kustomization{}
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(ks), live)).To(Succeed())
		g.Expect(live.Spec).To(Equal(ks.Spec))
	}, driftTimeout, interval).Should(Succeed(), "the patch stayed while the render fails")
	expectDriftEvent(f, obj, "Kustomization "+f.ns+"/app", d)
	f.waitFor(obj, metav1.ConditionFalse, kclv1.RenderFailedReason)
}
