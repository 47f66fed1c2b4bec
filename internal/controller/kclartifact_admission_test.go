package controller

import (
	"fmt"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kustomization"
)

// The security review of issue 53 played a namespace editor against a stage whose promotions
// need approval: the editor deleted the stage and created it again without spec.promotion, and
// wrote the objects the controller generates for it (the ExternalArtifact's status, the
// Kustomization's sourceRef and patches), which kustomize-controller applied before the
// controller repaired them. These tests are that editor, against config/admission as installed.

// fluxEditRules are the rules of Flux's stock ClusterRoles flux-edit and flux-view (flux2 v2.9.5,
// manifests/rbac/edit.yaml and view.yaml), which `flux install` aggregates into the built-in edit
// role (aggregate-to-edit). resources "*" matches the status subresources too: an editor may
// write the status of any Flux object.
var fluxEditRules = []rbacv1.PolicyRule{{
	APIGroups: []string{"notification.toolkit.fluxcd.io", "source.toolkit.fluxcd.io", "source.extensions.fluxcd.io",
		"helm.toolkit.fluxcd.io", "image.toolkit.fluxcd.io", "kustomize.toolkit.fluxcd.io"},
	Resources: []string{"*"},
	Verbs:     []string{"create", "delete", "deletecollection", "patch", "update"},
}, {
	APIGroups: []string{"notification.toolkit.fluxcd.io", "source.toolkit.fluxcd.io", "source.extensions.fluxcd.io",
		"helm.toolkit.fluxcd.io", "image.toolkit.fluxcd.io", "kustomize.toolkit.fluxcd.io"},
	Resources: []string{"*"},
	Verbs:     []string{"get", "list", "watch"},
}}

// namespaceEditor makes user an editor of the fixture's namespace as a cluster with Flux and this
// project installed has one: bound to edit, into which flux-edit, flux-view and
// config/rbac/kclartifact_editor_role.yaml aggregate. envtest runs no kube-controller-manager, so
// nothing aggregates: the user is bound to those ClusterRoles directly.
func namespaceEditor(f *fixture, user string) client.Client {
	f.t.Helper()
	fluxEdit := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kcl-test-flux-edit"}, Rules: fluxEditRules}
	f.g.Expect(client.IgnoreAlreadyExists(k8sClient.Create(f.ctx, fluxEdit))).To(Succeed())
	installManifests(f, "../../config/rbac/kclartifact_editor_role.yaml")
	for _, role := range []string{fluxEdit.Name, "kcl-artifact-controller-edit"} {
		f.g.Expect(k8sClient.Create(f.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-" + role, Namespace: f.ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})).To(Succeed())
	}
	return as(f, user)
}

// settle waits until refused answers as the policy's message says (the API server loads a policy
// a moment after it is created); on a timeout the test goes on, failed, so that each of its
// cases shows what the policy let through.
func settle(f *fixture, what string, refused func() error, message string) {
	f.t.Helper()
	soft := NewGomega(func(msg string, _ ...int) { f.t.Errorf("%s: %s", what, msg) })
	soft.Eventually(refused, timeout, interval).Should(MatchError(ContainSubstring(message)))
}

func forbidden(g Gomega, err error, message string) {
	g.ExpectWithOffset(1, err).To(HaveOccurred(), "let through")
	g.ExpectWithOffset(1, apierrors.IsForbidden(err)).To(BeTrue(), "not Forbidden: %v", err)
	g.ExpectWithOffset(1, err.Error()).To(ContainSubstring(message))
}

func mergePatch(body string) client.Patch { return client.RawPatch(types.MergePatchType, []byte(body)) }

// An editor can neither delete a stage whose promotions need approval (its Kustomization would
// prune production) nor, while it exists, create another of its name without the gate; an
// approver may delete it, and an editor any KCLArtifact that is not gated.
func TestAdmissionDeletingAGatedStageNeedsApprove(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	f.stage("dev", "", nil)
	prod := f.stage("prod", "dev", func(p *kclv1.Promotion) { p.Approval = kclv1.ApprovalRequired })
	scratch := f.create("scratch", nil)
	installAdmission(f)
	eve := namespaceEditor(f, "eve")
	refused := "eve may not delete KCLArtifact " + f.ns + "/prod, whose promotions need approval: " +
		"that needs the verb approve on kclartifacts (ClusterRole kcl-artifact-controller-approve)"

	settle(f, "a dry run of the editor's delete", func() error { return eve.Delete(f.ctx, prod.DeepCopy(), client.DryRunAll) }, refused)
	err := eve.Delete(f.ctx, prod.DeepCopy())
	forbidden(f.g, err, refused)
	t.Log(err)
	f.get(prod)
	f.g.Expect(prod.DeletionTimestamp).To(BeNil(), "the gated stage is being deleted")
	// nor can it be replaced: its name is taken while it exists
	shadow := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: f.ns}, Spec: *prod.Spec.DeepCopy()}
	shadow.Spec.Promotion = nil
	f.g.Expect(apierrors.IsAlreadyExists(eve.Create(f.ctx, shadow))).To(BeTrue(), "an ungated stage of the same name")

	// an editor deletes what is not gated
	f.g.Expect(eve.Delete(f.ctx, scratch)).To(Succeed())

	// an approver may
	alice := namespaceEditor(f, "alice")
	grant(f, "alice", "approve", "approve")
	f.g.Eventually(func() error { return alice.Delete(f.ctx, prod.DeepCopy(), client.DryRunAll) }, timeout, interval).Should(Succeed())
	f.g.Expect(alice.Delete(f.ctx, prod)).To(Succeed())
	f.g.Eventually(func() bool { return apierrors.IsNotFound(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(prod), prod)) },
		timeout, interval).Should(BeTrue())
}

// publishedGatedStage is dev, and prod gated on approval, published (approved by the test before
// the policy is installed), with prod's generated Kustomization and ExternalArtifact in place.
func publishedGatedStage(f *fixture) (dev, prod *kclv1.KCLArtifact) {
	f.t.Helper()
	f.commit("v1", map[string]string{"main.k": program})
	dev = f.waitReady(f.stage("dev", "", nil))
	prod = f.stage("prod", "dev", func(p *kclv1.Promotion) { p.Approval = kclv1.ApprovalRequired })
	f.healthy(dev)
	w := f.waiting(prod, "v1", 1)
	f.approve(prod, w.Digest, "admin")
	f.published(prod, "v1")
	f.g.Eventually(func(g Gomega) {
		for _, name := range []string{"dev", "prod"} {
			ea := &sourcev1.ExternalArtifact{}
			g.Expect(k8sClient.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, ea)).To(Succeed())
			g.Expect(ea.Status.Artifact).NotTo(BeNil())
			ks := &kustomizev1.Kustomization{}
			g.Expect(k8sClient.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, ks)).To(Succeed())
			g.Expect(ks.Labels).To(HaveKeyWithValue(kustomization.GeneratedLabel, name))
		}
	}, timeout, interval).Should(Succeed())
	return dev, prod
}

// bindAccount grants a service account rules in the fixture's namespace, as a Flux install's
// cluster-admin binding of kustomize-controller would (and more narrowly).
func bindAccount(f *fixture, namespace, name string, rules ...rbacv1.PolicyRule) {
	f.t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Rules: rules}
	f.g.Expect(k8sClient.Create(f.ctx, role)).To(Succeed())
	f.g.Expect(k8sClient.Create(f.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: namespace, Name: name}}})).To(Succeed())
}

// What the controller generates for a KCLArtifact is written by the controller (and
// kustomize-controller, the Kustomization's status) only: an editor's writes to the generated
// Kustomization and ExternalArtifact, status included, are refused, except a reconcile request;
// Kustomizations of the editor's own stay theirs.
func TestAdmissionGeneratedObjectsAreTheControllers(t *testing.T) {
	f := newFixture(t)
	dev, _ := publishedGatedStage(f)
	installAdmission(f)
	eve := namespaceEditor(f, "eve")
	ns := f.ns
	ks := func(name string) *kustomizev1.Kustomization {
		return &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	}
	tune := "; tune it with spec.kustomization of KCLArtifact " + ns + "/prod"
	changeKs := "eve may not change Kustomization " + ns + "/prod, labelled as generated for KCLArtifact " + ns + "/prod"
	settle(f, "a dry run of the editor's suspend", func() error {
		return eve.Patch(f.ctx, ks("prod"), mergePatch(`{"spec":{"suspend":true}}`), client.DryRunAll)
	}, changeKs)

	devEA := &sourcev1.ExternalArtifact{}
	f.g.Expect(k8sClient.Get(f.ctx, client.ObjectKey{Namespace: ns, Name: dev.Name}, devEA)).To(Succeed())
	for what, patch := range map[string]string{
		"adds patches": `{"spec":{"patches":[{"patch":"- op: replace\n  path: /data/env\n  value: eve","target":{"kind":"ConfigMap"}}]}}`,
		"points sourceRef at dev's ExternalArtifact": `{"spec":{"sourceRef":{"kind":"ExternalArtifact","name":"dev"}}}`,
		"suspends it":                          `{"spec":{"suspend":true}}`,
		"adds a label":                         `{"metadata":{"labels":{"team":"eve"}}}`,
		"requests a reconcile and suspends it": `{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":"now"}},"spec":{"suspend":true}}`,
		"removes the generated label":          `{"metadata":{"labels":{"kcl.contrib.fluxcd.io/name":null}}}`,
	} {
		t.Run("the editor "+what, func(t *testing.T) {
			g := NewWithT(t)
			err := eve.Patch(f.ctx, ks("prod"), mergePatch(patch))
			forbidden(g, err, changeKs)
			g.Expect(err.Error()).To(ContainSubstring(tune))
			t.Log(err)
		})
	}
	t.Run("the editor writes the Kustomization's status", func(t *testing.T) {
		g := NewWithT(t)
		err := eve.Status().Patch(f.ctx, ks("prod"), mergePatch(`{"status":{"lastAppliedRevision":"forged"}}`))
		forbidden(g, err, "eve may not change the status of Kustomization "+ns+"/prod, labelled as generated for KCLArtifact "+ns+"/prod")
	})
	t.Run("the editor points the ExternalArtifact's status at dev's artifact", func(t *testing.T) {
		g := NewWithT(t)
		ea := &sourcev1.ExternalArtifact{}
		g.Expect(eve.Get(f.ctx, client.ObjectKey{Namespace: ns, Name: "prod"}, ea)).To(Succeed())
		ea.Status.Artifact = devEA.Status.Artifact.DeepCopy()
		err := eve.Status().Update(f.ctx, ea)
		forbidden(g, err, "eve may not change the status of ExternalArtifact "+ns+"/prod, labelled as generated for KCLArtifact "+ns+"/prod")
		g.Expect(err.Error()).To(ContainSubstring("it serves the artifact of KCLArtifact " + ns + "/prod: change that KCLArtifact instead"))
		t.Log(err)
	})
	t.Run("the editor creates a Kustomization carrying the label", func(t *testing.T) {
		g := NewWithT(t)
		shadow := ks("shadow")
		shadow.Labels = map[string]string{kustomization.GeneratedLabel: "prod"}
		shadow.Spec = kustomizev1.KustomizationSpec{Interval: metav1.Duration{Duration: time.Minute}, Prune: true,
			SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.ExternalArtifactKind, Name: "dev"}}
		forbidden(g, eve.Create(f.ctx, shadow), "eve may not create Kustomization "+ns+"/shadow, labelled as generated for KCLArtifact "+ns+"/prod")
	})
	t.Run("the editor deletes the ExternalArtifact", func(t *testing.T) {
		g := NewWithT(t)
		ea := &sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: ns}}
		forbidden(g, eve.Delete(f.ctx, ea), "eve may not delete ExternalArtifact "+ns+"/prod")
	})
	t.Run("the editor deletes the Kustomization", func(t *testing.T) {
		g := NewWithT(t)
		forbidden(g, eve.Delete(f.ctx, ks("prod")), "eve may not delete Kustomization "+ns+"/prod, labelled as generated for KCLArtifact "+ns+"/prod")
	})

	// `flux reconcile kustomization`: the annotation alone
	t.Run("the editor requests a reconcile", func(t *testing.T) {
		g := NewWithT(t)
		token := time.Now().Format(time.RFC3339Nano)
		g.Expect(eve.Patch(f.ctx, ks("prod"), mergePatch(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`,
			meta.ReconcileRequestAnnotation, token)))).To(Succeed())
		got := ks("prod")
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(got), got)).To(Succeed())
		g.Expect(got.Annotations).To(HaveKeyWithValue(meta.ReconcileRequestAnnotation, token))
	})

	// kustomize-controller writes the status (and finalizers) of what it reconciles: its account is
	// bound to the verb generate by config/admission; another account with the same RBAC is not
	statusRules := rbacv1.PolicyRule{APIGroups: []string{kustomizev1.GroupVersion.Group},
		Resources: []string{"kustomizations", "kustomizations/status"}, Verbs: []string{"get", "update", "patch"}}
	bindAccount(f, "flux-system", "kustomize-controller", statusRules)
	bindAccount(f, "flux-system", "helm-controller", statusRules)
	writeStatus := func(c client.Client) error {
		var err error
		for range 20 {
			cur := ks("prod")
			if err = c.Get(f.ctx, client.ObjectKeyFromObject(cur), cur); err != nil {
				return err
			}
			cur.Status.ObservedGeneration = cur.Generation
			conditions.MarkTrue(cur, meta.ReadyCondition, meta.ReconciliationSucceededReason, "Applied revision: %s", "as kustomize-controller")
			if err = c.Status().Update(f.ctx, cur); !apierrors.IsConflict(err) {
				return err
			}
		}
		return err
	}
	t.Run("kustomize-controller writes the Kustomization's status", func(t *testing.T) {
		NewWithT(t).Expect(writeStatus(as(f, "system:serviceaccount:flux-system:kustomize-controller"))).To(Succeed())
	})
	t.Run("another controller's account writes the Kustomization's status", func(t *testing.T) {
		forbidden(NewWithT(t), writeStatus(as(f, "system:serviceaccount:flux-system:helm-controller")),
			"system:serviceaccount:flux-system:helm-controller may not change the status of Kustomization "+ns+"/prod")
	})

	// a Kustomization of the editor's own is theirs
	t.Run("the editor's own Kustomization", func(t *testing.T) {
		g := NewWithT(t)
		plain := ks("plain")
		plain.Spec = kustomizev1.KustomizationSpec{Interval: metav1.Duration{Duration: time.Minute}, Prune: true,
			SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.ExternalArtifactKind, Name: "dev"}}
		g.Expect(eve.Create(f.ctx, plain)).To(Succeed())
		g.Expect(eve.Patch(f.ctx, ks("plain"), mergePatch(`{"metadata":{"labels":{"team":"eve"}},"spec":{"suspend":true}}`))).To(Succeed())
		g.Expect(eve.Status().Patch(f.ctx, ks("plain"), mergePatch(`{"status":{"lastAppliedRevision":"mine"}}`))).To(Succeed())
		g.Expect(eve.Delete(f.ctx, ks("plain"))).To(Succeed())
	})

	// what the editor tried changed nothing
	got := ks("prod")
	f.get(got)
	f.g.Expect(got.Labels).To(HaveKeyWithValue(kustomization.GeneratedLabel, "prod"))
	f.g.Expect(got.Spec.Suspend).To(BeFalse())
	f.g.Expect(got.Spec.Patches).To(BeEmpty())
	f.g.Expect(got.Spec.SourceRef.Name).To(Equal("prod"))
	f.g.Expect(got.DeletionTimestamp).To(BeNil())
}

// The review of issue 58 played a namespace editor against a rejection held by an ungated stage:
// deleting that KCLArtifact, or relinking it (spec.promotion.from changed or removed), took its
// rejections out of the pipeline, and the rejected release was promoted again. Both need the verb
// approve, as rejecting does; an approver may, and an editor still edits the rest of its spec and
// deletes a KCLArtifact that rejects nothing.
func TestAdmissionAnEditorCannotTakeARejectionOutOfThePipeline(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	dev := f.waitReady(f.stage("dev", "", nil))
	staging := f.stage("staging", "dev", nil)
	scratch := f.create("scratch", nil)
	f.reject(staging, dev.Status.Artifact.Digest, "alice", "checkout errors")
	installAdmission(f)
	eve := namespaceEditor(f, "eve")
	relink := mergePatch(`{"spec":{"promotion":{"from":{"name":"scratch"}}}}`)
	relinked := "eve may not change spec.promotion.from of KCLArtifact " + f.ns + "/staging, which rejects releases " +
		"(kcl.contrib.fluxcd.io/reject): that takes its rejections out of the pipeline, and needs the verb approve on " +
		"kclartifacts (ClusterRole kcl-artifact-controller-approve)"
	deleted := "eve may not delete KCLArtifact " + f.ns + "/staging, which rejects releases (kcl.contrib.fluxcd.io/reject): " +
		"that takes its rejections out of the pipeline, and needs the verb approve on kclartifacts (ClusterRole kcl-artifact-controller-approve)"

	settle(f, "a dry run of the editor's relink", func() error { return eve.Patch(f.ctx, staging.DeepCopy(), relink, client.DryRunAll) }, relinked)
	err := eve.Patch(f.ctx, staging.DeepCopy(), relink)
	forbidden(f.g, err, relinked)
	t.Log(err)
	forbidden(f.g, eve.Patch(f.ctx, staging.DeepCopy(), mergePatch(`{"spec":{"promotion":null}}`)), relinked)
	err = eve.Delete(f.ctx, staging.DeepCopy())
	forbidden(f.g, err, deleted)
	t.Log(err)
	f.get(staging)
	f.g.Expect(staging.DeletionTimestamp).To(BeNil(), "the KCLArtifact holding the rejection is being deleted")
	f.g.Expect(staging.Spec.Promotion.From.Name).To(Equal("dev"))

	// the rest of its spec is the editor's, and so is what rejects nothing
	f.g.Expect(eve.Patch(f.ctx, staging.DeepCopy(), mergePatch(`{"spec":{"arguments":{"env":"staging-2"}}}`))).To(Succeed())
	f.g.Expect(eve.Delete(f.ctx, scratch)).To(Succeed())

	// an approver may
	alice := namespaceEditor(f, "alice")
	grant(f, "alice", "approve", "approve")
	f.g.Eventually(func() error { return alice.Patch(f.ctx, staging.DeepCopy(), relink, client.DryRunAll) }, timeout, interval).Should(Succeed())
	f.g.Expect(alice.Patch(f.ctx, staging.DeepCopy(), relink)).To(Succeed())
	f.g.Expect(alice.Delete(f.ctx, staging.DeepCopy())).To(Succeed())
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(staging), staging))
	},
		timeout, interval).Should(BeTrue())
}
