package controller

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// installAdmission creates config/admission as config/admission/kustomization.yaml lists it: the
// policies, their bindings restricted to one namespace (the other tests write as they like), and
// the ClusterRoles and ClusterRoleBindings (cluster-wide, created once).
func installAdmission(f *fixture) {
	f.t.Helper()
	var k struct {
		Resources []string `json:"resources"`
	}
	raw, err := os.ReadFile("../../config/admission/kustomization.yaml")
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096).Decode(&k)).To(Succeed())
	f.g.Expect(k.Resources).NotTo(BeEmpty())
	for _, file := range k.Resources {
		installManifests(f, filepath.Join("../../config/admission", file))
	}
}

// installManifests creates the objects of a YAML file; a ValidatingAdmissionPolicyBinding is
// restricted to the fixture's namespace, any other object is created once.
func installManifests(f *fixture, path string) {
	f.t.Helper()
	raw, err := os.ReadFile(path)
	f.g.Expect(err).NotTo(HaveOccurred())
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else {
			f.g.Expect(err).NotTo(HaveOccurred())
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetKind() == "ValidatingAdmissionPolicyBinding" {
			u.SetName(u.GetName() + "-" + f.ns)
			f.g.Expect(unstructured.SetNestedField(u.Object, map[string]any{"namespaceSelector": map[string]any{
				"matchLabels": map[string]any{"kubernetes.io/metadata.name": f.ns}}}, "spec", "matchResources")).To(Succeed())
		}
		err := k8sClient.Create(f.ctx, u)
		if u.GetKind() != "ValidatingAdmissionPolicyBinding" && client.IgnoreAlreadyExists(err) == nil {
			continue
		}
		f.g.Expect(err).NotTo(HaveOccurred())
		f.t.Cleanup(func() { _ = k8sClient.Delete(f.ctx, u) })
	}
}

// as is a client of the API server authenticated as the admin, impersonating user.
func as(f *fixture, user string) client.Client {
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: k8sClient.Scheme()})
	f.g.Expect(err).NotTo(HaveOccurred())
	return c
}

func grant(f *fixture, user, name string, verbs ...string) {
	f.t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{kclv1.GroupVersion.Group}, Resources: []string{"kclartifacts"}, Verbs: verbs}}}
	f.g.Expect(k8sClient.Create(f.ctx, role)).To(Succeed())
	f.g.Expect(k8sClient.Create(f.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}}})).To(Succeed())
}

// annotate sets the approve annotations as user.
func annotate(f *fixture, c client.Client, obj *kclv1.KCLArtifact, digest, by string) error {
	cur := &kclv1.KCLArtifact{}
	if err := c.Get(f.ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
		return err
	}
	patch := client.MergeFrom(cur.DeepCopy())
	if cur.Annotations == nil {
		cur.Annotations = map[string]string{}
	}
	cur.Annotations[kclv1.ApproveAnnotation] = digest
	cur.Annotations[kclv1.ApprovedByAnnotation] = by
	return c.Patch(f.ctx, cur, patch)
}

// An approval is a person's act: nobody approves in another's name, and approving needs the verb
// approve on the KCLArtifact, which editing does not give.
func TestApprovalsNeedTheApproveVerbAndTheirOwnName(t *testing.T) {
	f := newFixture(t)
	installAdmission(f)
	f.commit("v1", map[string]string{"main.k": program})
	prod := f.stage("prod", "dev", func(p *kclv1.Promotion) { p.Approval = kclv1.ApprovalRequired })
	grant(f, "alice", "edit", "get", "list", "watch", "update", "patch")
	alice := as(f, "alice")
	digest := "sha256:" + "ab12"

	// the policy takes effect once the API server has loaded it: each try approves another
	// digest, since an unchanged approval is let through
	tries := 0
	f.g.Eventually(func() error { tries++; return annotate(f, alice, prod, fmt.Sprintf("%s%d", digest, tries), "alice") }, timeout, interval).
		Should(MatchError(ContainSubstring("alice may not approve promotions of KCLArtifact " + f.ns + "/prod: that needs the verb approve on kclartifacts")))

	grant(f, "alice", "approve", "approve")
	f.g.Eventually(func() error { return annotate(f, alice, prod, digest, "alice") }, timeout, interval).Should(Succeed())
	f.g.Expect(annotate(f, alice, prod, digest+"cd", "bob")).To(MatchError(ContainSubstring(
		"an approval must name its approver: set kcl.contrib.fluxcd.io/approved-by to alice")))

	// an editor changes the spec with the approval in place, or withdraws it
	grant(f, "carol", "edit-carol", "get", "update", "patch")
	carol := as(f, "carol")
	f.g.Expect(annotate(f, carol, prod, digest+"cd", "carol")).To(MatchError(ContainSubstring("carol may not approve")))
	f.g.Expect(updateAs(f, carol, prod, func(s *kclv1.KCLArtifactSpec) { s.Arguments["replicas"] = "3" })).To(Succeed())
	f.g.Expect(annotate(f, carol, prod, "", "")).To(Succeed())

	// nor can an editor lift the gate, or change how the approved artifact is applied
	for what, mutate := range map[string]func(*kclv1.KCLArtifactSpec){
		"drops the promotion": func(s *kclv1.KCLArtifactSpec) { s.Promotion = nil },
		"drops the approval":  func(s *kclv1.KCLArtifactSpec) { s.Promotion.Approval = "" },
		"patches what is applied": func(s *kclv1.KCLArtifactSpec) {
			s.Kustomization = &kclv1.KustomizationTemplate{TargetNamespace: "kube-system"}
		},
	} {
		f.g.Expect(updateAs(f, carol, prod, mutate)).To(MatchError(ContainSubstring(
			"carol may not change spec.promotion or spec.kustomization of KCLArtifact "+f.ns+"/prod, whose promotions need approval")), what)
	}
	f.g.Expect(updateAs(f, alice, prod, func(s *kclv1.KCLArtifactSpec) {
		s.Promotion.Soak = &metav1.Duration{Duration: time.Minute}
	})).To(Succeed(), "an approver may")
}

// updateAs changes the spec as a user, again when the controller's status write came between
// the read and the update (a conflict), never again for any other answer.
func updateAs(f *fixture, c client.Client, obj *kclv1.KCLArtifact, mutate func(*kclv1.KCLArtifactSpec)) error {
	var err error
	for range 20 {
		cur := &kclv1.KCLArtifact{}
		if err = c.Get(f.ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		mutate(&cur.Spec)
		if err = c.Update(f.ctx, cur); !apierrors.IsConflict(err) {
			return err
		}
	}
	return err
}
