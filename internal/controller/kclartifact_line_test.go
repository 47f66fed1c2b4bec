package controller

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// programAt is the test program whose replicas default is n: each n renders another artifact.
func programAt(n string) string {
	return strings.Replace(program, `or 1`, `or `+n, 1)
}

// stopLine stops the line of namespace ns as user would with flux kcl stop-line; the test's
// cleanup resumes it.
func stopLine(f *fixture, ns, reason, by string) {
	f.t.Helper()
	setLine(f, ns, map[string]any{kclv1.StopTheLineAnnotation: reason, kclv1.StoppedByAnnotation: by,
		kclv1.StoppedAtAnnotation: time.Now().UTC().Format(time.RFC3339)})
	f.t.Cleanup(func() { resumeLine(f, ns) })
}

func resumeLine(f *fixture, ns string) {
	f.t.Helper()
	setLine(f, ns, map[string]any{kclv1.StopTheLineAnnotation: nil, kclv1.StoppedByAnnotation: nil, kclv1.StoppedAtAnnotation: nil})
}

func setLine(f *fixture, ns string, annotations map[string]any) {
	f.t.Helper()
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
	raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	f.g.Expect(err).NotTo(HaveOccurred())
	patch := client.RawPatch(types.MergePatchType, raw)
	f.g.Expect(k8sClient.Patch(f.ctx, obj, patch)).To(Succeed())
}

// exempt approves digest of a stage with an exemption from the stopped line.
func (f *fixture) exempt(obj *kclv1.KCLArtifact, digest, by, why string) {
	f.t.Helper()
	f.annotate(obj, map[string]string{kclv1.ApproveAnnotation: digest, kclv1.ApprovedByAnnotation: by, kclv1.ExemptionAnnotation: why})
}

// holds checks, over a few reconciles, that the stage keeps serving digest and keeps the newest
// waiting artifact behind the closed line gate.
func holds(f *fixture, obj *kclv1.KCLArtifact, digest string) {
	f.t.Helper()
	for range 3 {
		f.requestReconcile(obj)
		f.get(obj)
		f.g.Expect(obj.Status.Artifact.Digest).To(Equal(digest), "the stage published while its line is stopped")
		f.g.Expect(conditions.GetReason(obj, kclv1.PromotedCondition)).To(Equal(kclv1.LineStoppedReason))
	}
}

// The line of a namespace stopped: no stage publishes a new artifact, and the Promoted
// condition says who stopped it and why; a rollback still happens; an approver's exemption lets
// exactly the digest it names through, recorded in history; resumed, the stage catches up.
func TestStopTheLineHoldsTheStagesOfANamespace(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	dev := f.waitReady(f.stage("dev", "", nil))
	staging := f.create("staging", func(s *kclv1.KCLArtifactSpec) {
		s.Arguments = map[string]string{"env": "staging"}
		s.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "dev"}}
		s.Remediation = &kclv1.Remediation{}
	})
	f.healthy(dev)
	v1 := f.healthy(f.published(staging, "v1")).Status.Artifact.Digest
	f.commit("v2", map[string]string{"main.k": programAt("2")})
	f.healthy(f.waitRevision(dev, "v2"))
	staging = f.published(staging, "v2")

	stopLine(f, f.ns, "incident 42: checkout errors", "alice")
	t.Run("a failed artifact is rolled back while the line is stopped", func(t *testing.T) {
		f.get(staging)
		playKustomizeFailure(f, "staging", staging.Status.Artifact.Revision, meta.HealthCheckFailedReason, healthCheckFailed)
		staging = waitRemediated(f, staging, metav1.ConditionTrue, kclv1.RolledBackReason)
		f.g.Expect(staging.Status.Artifact.Digest).To(Equal(v1))
		msg := conditions.GetMessage(staging, kclv1.PromotedCondition)
		f.g.Expect(msg).To(ContainSubstring("the line is stopped (namespace " + f.ns + ") by alice"))
		f.g.Expect(msg).To(ContainSubstring("incident 42: checkout errors"))
	})

	f.commit("v3", map[string]string{"main.k": programAt("3")})
	f.healthy(f.waitRevision(dev, "v3"))
	f.waiting(staging, "v3", 1)
	waitCondition(f, staging, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.LineStoppedReason)
	// staging sees dev's health at its next reconcile: the upstream gate opens then, the line's not
	var w3 kclv1.WaitingArtifact
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(staging), staging)).To(Succeed())
		g.Expect(staging.Status.Promotion.Waiting).NotTo(BeEmpty())
		w3 = staging.Status.Promotion.Waiting[0]
		g.Expect(gate(w3, kclv1.GateUpstream).Open).To(BeTrue(), "every other gate is open: only the line holds it")
	}, timeout, interval).Should(Succeed())
	f.g.Expect(w3.SourceRevision).To(Equal("main@sha1:v3"))
	f.g.Expect(w3.Gates[0].Name).To(Equal(kclv1.GateLine), "the line gate comes first")
	f.g.Expect(w3.Gates[0].Open).To(BeFalse())
	f.get(staging)
	msg := conditions.GetMessage(staging, kclv1.PromotedCondition)
	f.g.Expect(msg).To(ContainSubstring("by alice"))
	f.g.Expect(msg).To(ContainSubstring("incident 42: checkout errors"))
	holds(f, staging, v1)

	t.Run("an exemption lets exactly the approved digest through", func(t *testing.T) {
		f.exempt(staging, w3.Digest, "bob", "hotfix for incident 42")
		staging = f.published(staging, "v3")
		rec := staging.Status.History[0].Promotion
		f.g.Expect(rec).NotTo(BeNil())
		f.g.Expect(rec.ApprovedBy).To(Equal("bob"))
		f.g.Expect(rec.Exemption).To(Equal("hotfix for incident 42"))
		f.healthy(staging)

		f.commit("v4", map[string]string{"main.k": programAt("4")})
		f.healthy(f.waitRevision(dev, "v4"))
		f.waiting(staging, "v4", 1)
		waitCondition(f, staging, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.LineStoppedReason)
		holds(f, staging, staging.Status.Artifact.Digest)
		f.get(staging)
		f.g.Expect(staging.Status.SourceRevision).To(Equal("main@sha1:v3"))
	})

	resumeLine(f, f.ns)
	staging = f.published(staging, "v4")
	f.g.Expect(staging.Status.History[0].Promotion.Exemption).To(BeEmpty())
	waitCondition(f, staging, kclv1.PromotedCondition, metav1.ConditionTrue, kclv1.PromotedReason)
	f.g.Expect(conditions.GetMessage(staging, kclv1.PromotedCondition)).NotTo(ContainSubstring("line is stopped"))
}

// The line stopped on the controller's own namespace holds the stages of every namespace.
func TestStopTheLineOfEveryNamespace(t *testing.T) {
	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	dev := f.waitReady(f.stage("dev", "", nil))
	staging := f.stage("staging", "dev", nil)
	stopLine(f, runtimeNamespace, "release freeze", "operator")
	f.healthy(dev)
	waitCondition(f, staging, kclv1.PromotedCondition, metav1.ConditionFalse, kclv1.LineStoppedReason)
	f.get(staging)
	f.g.Expect(staging.Status.Artifact).To(BeNil())
	f.g.Expect(conditions.GetMessage(staging, kclv1.PromotedCondition)).To(ContainSubstring(
		"the line is stopped (every namespace, on namespace " + runtimeNamespace + ") by operator"))
	f.g.Expect(conditions.GetMessage(staging, kclv1.PromotedCondition)).To(ContainSubstring("release freeze"))
	resumeLine(f, runtimeNamespace)
	f.published(staging, "v1")
}

// Stopping the line names who stops it, as the API server authenticates them; a namespace's
// editor cannot stop (or resume) its line, and an exemption is an approval: it needs the verb
// approve.
func TestStoppingTheLineAndExemptingAreAdmitted(t *testing.T) {
	f := newFixture(t)
	installAdmission(f)
	f.commit("v1", map[string]string{"main.k": program})
	f.waitReady(f.stage("dev", "", nil))
	staging := f.stage("staging", "dev", nil)

	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "stop-lines-" + f.ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "patch", "update"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "stop-lines-" + f.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "oncall"}}}
	for _, o := range []client.Object{role, binding} {
		f.g.Expect(k8sClient.Create(f.ctx, o)).To(Succeed())
		f.t.Cleanup(func() { _ = k8sClient.Delete(f.ctx, o) })
	}
	f.t.Cleanup(func() { resumeLine(f, f.ns) })
	oncall := as(f, "oncall")
	stop := func(c client.Client, reason, by string) error {
		raw, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
			kclv1.StopTheLineAnnotation: reason, kclv1.StoppedByAnnotation: by}}})
		f.g.Expect(err).NotTo(HaveOccurred())
		return c.Patch(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}, client.RawPatch(types.MergePatchType, raw))
	}
	// the policy takes effect once the API server has loaded it: each try says another reason
	tries := 0
	f.g.Eventually(func() error { tries++; return stop(oncall, fmt.Sprintf("incident %d", tries), "someone-else") }, timeout, interval).
		Should(MatchError(ContainSubstring("stopping the line must name who stops it: set kcl.contrib.fluxcd.io/stopped-by to oncall")))
	f.g.Expect(stop(oncall, "incident 7", "oncall")).To(Succeed())

	grant(f, "alice", "edit", "get", "list", "watch", "update", "patch")
	alice := as(f, "alice")
	err := stop(alice, "", "alice")
	f.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "an editor of the namespace resumes its line: %v", err)

	// an approver approved the waiting artifact; the editor adds an exemption to that approval
	w := f.waiting(staging, "v1", 1)
	grant(f, "bob", "approve-bob", "get", "update", "patch", "approve")
	f.g.Eventually(func() error { return annotate(f, as(f, "bob"), staging, w.Digest, "bob") }, timeout, interval).Should(Succeed())
	cur := &kclv1.KCLArtifact{}
	f.g.Expect(alice.Get(f.ctx, client.ObjectKeyFromObject(staging), cur)).To(Succeed())
	cur.Annotations[kclv1.ExemptionAnnotation] = "my own hotfix"
	err = alice.Update(f.ctx, cur)
	f.g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "an editor adds an exemption to bob's approval: %v", err)
	f.g.Expect(err).To(MatchError(ContainSubstring("set kcl.contrib.fluxcd.io/approved-by to alice")))
	f.g.Expect(alice.Get(f.ctx, client.ObjectKeyFromObject(staging), cur)).To(Succeed())
	f.g.Expect(annotate(f, alice, staging, "", "")).To(Succeed(), "withdrawing an approval is free")
	f.get(staging)
	f.g.Expect(staging.Status.Artifact).To(BeNil())
}
