package controller

import (
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// refuseAsKustomizeController reports the generated Kustomization failed to apply revision, as
// kustomize-controller v1.9 does when the account it impersonates may not apply an object: on the
// Ready condition of this generation, while status.observedGeneration stays -1, since it records
// that only on success and this Kustomization never succeeded.
func refuseAsKustomizeController(f *fixture, name, revision, message string) {
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}
	f.g.Eventually(func() error {
		f.get(ks)
		ks.Status.ObservedGeneration = -1
		ks.Status.LastAttemptedRevision = revision
		conditions.MarkFalse(ks, meta.ReadyCondition, meta.ReconciliationFailedReason, "%s", message)
		return k8sClient.Status().Update(f.ctx, ks)
	}, timeout, interval).Should(Succeed())
}

// A tenant whose program renders an object its account may not apply learns what was refused and
// why from the KCLArtifact: KustomizationReady says it, and so does one Warning event (not one per
// reconcile), which alerting forwards.
func TestKustomizationRefusalIsAWarningEvent(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("refused", nil))
	refusal := `ConfigMap/other/app-dev dry-run failed (Forbidden): configmaps "app-dev" is forbidden: ` +
		`User "system:serviceaccount:` + f.ns + `:tenant" cannot patch resource "configmaps" in API group "" in the namespace "other"`
	refuseAsKustomizeController(f, "refused", obj.Status.Artifact.Revision, refusal)

	waitKustomizationReady(f, obj, metav1.ConditionFalse, meta.ReconciliationFailedReason)
	f.g.Expect(conditions.GetMessage(obj, kclv1.KustomizationReadyCondition)).To(Equal(refusal))
	warnings := func() []eventv1.Event {
		var out []eventv1.Event
		for _, e := range eventsReceiver.of(obj) {
			if e.Severity == eventv1.EventSeverityError && e.Reason == meta.ReconciliationFailedReason {
				out = append(out, e)
			}
		}
		return out
	}
	f.g.Eventually(func() int { return len(warnings()) }, timeout, interval).Should(Equal(1))
	f.g.Expect(warnings()[0].Message).To(Equal("Kustomization " + f.ns + "/refused: " + refusal))

	// reconciled again with the same refusal: no second event
	f.requestReconcile(obj)
	f.g.Expect(warnings()).To(HaveLen(1))
}
