package controller

import (
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kustomization"
)

// suspendAsFlux does what `flux suspend kustomization` does, and labels the object: a merge
// patch by another manager.
func suspendAsFlux(f *fixture, ks *kustomizev1.Kustomization) {
	patch := []byte(`{"spec":{"suspend":true},"metadata":{"labels":{"team":"ops"}}}`)
	f.g.Expect(k8sClient.Patch(f.ctx, ks, client.RawPatch(types.MergePatchType, patch), client.FieldOwner("flux"))).To(Succeed())
}

func generatedKustomization(f *fixture, name string) *kustomizev1.Kustomization {
	return f.get(&kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}).(*kustomizev1.Kustomization)
}

// `flux suspend kustomization` on the generated Kustomization, with a label, while the template
// changes: the Kustomization ends up as the template says, neither suspended nor labelled, and
// the apply manager alone owns its spec and labels (a field the template drops goes).
func TestFluxSuspendOfTheGeneratedKustomizationIsUndone(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	ks := generatedKustomization(f, "app")
	suspendAsFlux(f, ks)

	f.commit("bbb", map[string]string{"main.k": strings.Replace(program, `"dev"`, `"new"`, 1)})
	f.update(obj, func(s *kclv1.KCLArtifactSpec) {
		s.Kustomization = &kclv1.KustomizationTemplate{Interval: &metav1.Duration{Duration: 9 * time.Minute}}
	})
	f.waitRevision(obj, "bbb")
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(ks), ks)).To(Succeed())
		g.Expect(ks.Spec.Interval.Duration).To(Equal(9 * time.Minute))
		g.Expect(ks.Spec.Suspend).To(BeFalse(), "flux suspend stayed")
		g.Expect(ks.Labels).To(Equal(map[string]string{kustomization.GeneratedLabel: "app"}))
	}, timeout, interval).Should(Succeed())
	for _, mf := range ks.ManagedFields {
		if mf.Subresource == "" && mf.Manager != "kcl-artifact-controller" {
			f.g.Expect(string(mf.FieldsV1.Raw)).NotTo(Or(ContainSubstring("f:spec"), ContainSubstring("f:labels")),
				"%s still owns fields of the spec or labels", mf.Manager)
		}
	}
}

// spec.suspend on the KCLArtifact still stops everything it does: no render, and the generated
// objects are left as they are.
func TestSuspendedKCLArtifactLeavesGeneratedObjectsAlone(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	f.update(obj, func(s *kclv1.KCLArtifactSpec) {
		s.Suspend = true
		s.Kustomization = &kclv1.KustomizationTemplate{Interval: &metav1.Duration{Duration: 9 * time.Minute}}
	})
	f.requestReconcile(obj)
	ks := generatedKustomization(f, "app")
	f.g.Expect(ks.Spec.Interval.Duration).To(Equal(time.Hour), "a suspended KCLArtifact changed its Kustomization")
	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Suspend = false })
	f.g.Eventually(func() time.Duration {
		return generatedKustomization(f, "app").Spec.Interval.Duration
	}, timeout, interval).Should(Equal(9 * time.Minute))
}

// Labels reach the generated objects, the sharding key first of all, so that a sharded
// kustomize-controller picks the Kustomization up; the toolkit's bookkeeping labels do not.
func TestLabelsArePropagatedToGeneratedObjects(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := &kclv1.KCLArtifact{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns, Labels: map[string]string{
			"sharding.fluxcd.io/key":            "shard1",
			"kustomize.toolkit.fluxcd.io/name":  "parent",
			"app.kubernetes.io/part-of":         "shop",
			"kustomize.toolkit.fluxcd.io/prune": "disabled",
		}},
		Spec: kclv1.KCLArtifactSpec{SourceRef: kclv1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: f.repo.Name},
			Interval: metav1.Duration{Duration: time.Hour}},
	}
	f.g.Expect(k8sClient.Create(f.ctx, obj)).To(Succeed())
	f.waitReady(obj)
	want := map[string]string{"sharding.fluxcd.io/key": "shard1", "app.kubernetes.io/part-of": "shop", kustomization.GeneratedLabel: "app"}
	f.g.Expect(generatedKustomization(f, "app").Labels).To(Equal(want))
	ea := f.get(&sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}})
	f.g.Expect(ea.GetLabels()).To(Equal(want))
}

// Objects written by earlier releases (CreateOrUpdate: an update by the controller's manager)
// are handed to the apply manager: a field the template no longer sets goes away.
func TestFieldsOfEarlierReleasesAreTakenOverByApply(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) {
		s.Kustomization = &kclv1.KustomizationTemplate{Disabled: true}
		// within --max-timeout: a longer interval would get the cap as the Kustomization's timeout
		s.Interval = metav1.Duration{Duration: 5 * time.Minute}
	}))
	// suspended, so that the opt-out does not remove the object planted below
	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Suspend = true })
	f.waitReady(obj)
	// as an earlier release created it: an update-style write by the controller's manager
	legacy := &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns, Labels: map[string]string{kustomization.GeneratedLabel: "app"}},
		Spec:       kustomization.Spec(obj),
	}
	legacy.Spec.Timeout = &metav1.Duration{Duration: 42 * time.Second}
	f.g.Expect(controllerRef(obj, legacy)).To(Succeed())
	f.g.Expect(k8sClient.Create(f.ctx, legacy, client.FieldOwner("kcl-artifact-controller"))).To(Succeed())

	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Kustomization, s.Suspend = nil, false })
	ks := &kustomizev1.Kustomization{}
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(legacy), ks)).To(Succeed())
		g.Expect(ks.Spec.Timeout).To(BeNil())
	}, timeout, interval).Should(Succeed())
	for _, mf := range generatedKustomization(f, "app").ManagedFields {
		f.g.Expect(mf.Manager == "kcl-artifact-controller" && mf.Operation == metav1.ManagedFieldsOperationUpdate).
			To(BeFalse(), "an update entry of the controller is left: %+v", mf)
	}
}

func controllerRef(owner *kclv1.KCLArtifact, o client.Object) error {
	return controllerutil.SetControllerReference(owner, o, testScheme())
}
