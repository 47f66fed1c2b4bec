package controller

import (
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

const (
	subdomainPattern = `'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'`
	labelPattern     = `'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'`
)

// Issue 54, finding 5: a reference's name that no object can have (`vic/creds`) is refused by
// the API server, with its message, for every reference field of the spec: before, the CRD had
// no pattern for any of them, and argumentsFrom `vic/creds` was a transient Failed, retried with
// backoff forever.
func TestMalformedNamesAreRefusedAtAdmission(t *testing.T) {
	f := newFixture(t)
	long := strings.Repeat("a", 254)
	kustomizationWith := func(mutate func(*kclv1.KustomizationTemplate)) func(*kclv1.KCLArtifactSpec) {
		return func(s *kclv1.KCLArtifactSpec) {
			s.Kustomization = &kclv1.KustomizationTemplate{}
			mutate(s.Kustomization)
		}
	}
	for _, tc := range []struct {
		field  string
		mutate func(*kclv1.KCLArtifactSpec)
		want   string
	}{
		{"argumentsFrom name", func(s *kclv1.KCLArtifactSpec) {
			s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "Secret", Name: "vic/creds"}}
		}, `spec.argumentsFrom[0].name: Invalid value: "vic/creds": spec.argumentsFrom[0].name in body should match ` + subdomainPattern},
		{"argumentsFrom name of 254 bytes", func(s *kclv1.KCLArtifactSpec) {
			s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "ConfigMap", Name: long}}
		}, `spec.argumentsFrom[0].name: Too long: may not be more than 253 bytes`},
		{"sourceRef name", func(s *kclv1.KCLArtifactSpec) { s.SourceRef.Name = "../repo" },
			`spec.sourceRef.name: Invalid value: "../repo": spec.sourceRef.name in body should match ` + subdomainPattern},
		{"sourceRef namespace", func(s *kclv1.KCLArtifactSpec) { s.SourceRef.Namespace = "tenant.b" },
			`spec.sourceRef.namespace: Invalid value: "tenant.b": spec.sourceRef.namespace in body should match ` + labelPattern},
		{"registrySecretRef name", func(s *kclv1.KCLArtifactSpec) { s.RegistrySecretRef = &kclv1.LocalObjectReference{Name: "vic/reg"} },
			`spec.registrySecretRef.name: Invalid value: "vic/reg": spec.registrySecretRef.name in body should match ` + subdomainPattern},
		{"gitCredentials secretRef name", func(s *kclv1.KCLArtifactSpec) {
			s.GitCredentials = []kclv1.GitCredentials{{Host: "git.example.com", SecretRef: kclv1.LocalObjectReference{Name: "Git_Creds"}}}
		}, `spec.gitCredentials[0].secretRef.name: Invalid value: "Git_Creds": spec.gitCredentials[0].secretRef.name in body should match ` + subdomainPattern},
		{"promotion.from name", func(s *kclv1.KCLArtifactSpec) {
			s.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "dev/app"}}
		}, `spec.promotion.from.name: Invalid value: "dev/app": spec.promotion.from.name in body should match ` + subdomainPattern},
		{"promotion.from namespace", func(s *kclv1.KCLArtifactSpec) {
			s.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "app", Namespace: long[:64]}}
		}, `spec.promotion.from.namespace: Too long: may not be more than 63 bytes`},
		{"kustomization serviceAccountName", kustomizationWith(func(k *kclv1.KustomizationTemplate) { k.ServiceAccountName = "kube-system/admin" }),
			`spec.kustomization.serviceAccountName: Invalid value: "kube-system/admin": spec.kustomization.serviceAccountName in body should match ` + subdomainPattern},
		{"kustomization targetNamespace", kustomizationWith(func(k *kclv1.KustomizationTemplate) { k.TargetNamespace = "Prod" }),
			`spec.kustomization.targetNamespace: Invalid value: "Prod": spec.kustomization.targetNamespace in body should match ` + labelPattern},
		{"kustomization kubeConfig secretRef name", kustomizationWith(func(k *kclv1.KustomizationTemplate) {
			k.KubeConfig = &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "other/kubeconfig"}}
		}), `spec.kustomization.kubeConfig: Invalid value: secretRef.name must be a Kubernetes object name (an RFC 1123 subdomain)`},
		{"kustomization kubeConfig configMapRef name", kustomizationWith(func(k *kclv1.KustomizationTemplate) {
			k.KubeConfig = &meta.KubeConfigReference{ConfigMapRef: &meta.LocalObjectReference{Name: "Spoke"}}
		}), `spec.kustomization.kubeConfig: Invalid value: configMapRef.name must be a Kubernetes object name (an RFC 1123 subdomain)`},
		{"kustomization decryption secretRef name", kustomizationWith(func(k *kclv1.KustomizationTemplate) {
			k.Decryption = &kustomizev1.Decryption{Provider: "sops", SecretRef: &meta.LocalObjectReference{Name: "sops/keys"}}
		}), `spec.kustomization.decryption: Invalid value: secretRef.name must be a Kubernetes object name (an RFC 1123 subdomain)`},
	} {
		obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "odd", Namespace: f.ns},
			Spec: kclv1.KCLArtifactSpec{SourceRef: kclv1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: f.repo.Name},
				Interval: metav1.Duration{Duration: 3600e9}}}
		tc.mutate(&obj.Spec)
		err := k8sClient.Create(f.ctx, obj)
		if err == nil {
			_ = k8sClient.Delete(f.ctx, obj)
		}
		f.g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: %v", tc.field, err)
		f.g.Expect(err.Error()).To(ContainSubstring(tc.want), tc.field)
	}

	// the names Kubernetes allows pass: dots, dashes, digits first, 253 bytes, a 63-byte namespace
	name253 := strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
	ok := f.create("ok", func(s *kclv1.KCLArtifactSpec) {
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "ConfigMap", Name: name253, Optional: true},
			{Kind: "Secret", Name: "0-creds.v2", Optional: true}}
		s.Kustomization = &kclv1.KustomizationTemplate{ServiceAccountName: "tenant-a.deployer", TargetNamespace: long[:63],
			DependsOn: []kustomizev1.DependencyReference{{Name: "infra.v1", Namespace: "flux-system"}}}
	})
	f.g.Expect(ok.Spec.ArgumentsFrom[0].Name).To(HaveLen(253))
}

// A name that gets past the CRD is stalled at the first reconcile with the field, the name and
// Kubernetes' rule, never retried, and goes into no request and no generated Kustomization: an
// object stored before the CRD had its patterns, or a name in Flux's types of
// spec.kustomization that the CRD cannot check within its CEL cost budget (dependsOn, healthChecks,
// postBuild.substituteFrom, lists of Flux's types without a length bound).
func TestMalformedNamesPastAdmissionStall(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	for _, tc := range []struct {
		name   string
		mutate func(*kclv1.KustomizationTemplate)
		want   string
	}{
		{"depends", func(k *kclv1.KustomizationTemplate) {
			k.DependsOn = []kustomizev1.DependencyReference{{Name: "infra", Namespace: "flux/system"}}
		}, `spec.kustomization.dependsOn[0].namespace "flux/system" is not a namespace's name (a lowercase RFC 1123 label must consist of`},
		{"health", func(k *kclv1.KustomizationTemplate) {
			k.HealthChecks = []meta.NamespacedObjectKindReference{{Kind: "Deployment", Name: "web/x"}}
		}, `spec.kustomization.healthChecks[0].name "web/x" is not an object's name (a lowercase RFC 1123 subdomain must consist of`},
		{"substitute", func(k *kclv1.KustomizationTemplate) {
			k.PostBuild = &kustomizev1.PostBuild{SubstituteFrom: []kustomizev1.SubstituteReference{{Kind: "Secret", Name: "vic/vars"}}}
		}, `spec.kustomization.postBuild.substituteFrom[0].name "vic/vars" is not an object's name`},
	} {
		obj := f.create(tc.name, func(s *kclv1.KCLArtifactSpec) {
			s.Kustomization = &kclv1.KustomizationTemplate{}
			tc.mutate(s.Kustomization)
		})
		obj = f.waitFor(obj, metav1.ConditionFalse, kclv1.InvalidReferenceReason)
		msg := conditions.GetMessage(obj, meta.ReadyCondition)
		f.g.Expect(msg).To(ContainSubstring(tc.want), tc.name)
		f.g.Expect(msg).To(HaveSuffix("nothing is read or published until the spec names valid objects"), tc.name)
		f.g.Expect(conditions.IsStalled(obj)).To(BeTrue(), tc.name)
		f.g.Expect(conditions.IsReconciling(obj)).To(BeFalse(), "%s: not retried", tc.name)
		f.g.Expect(obj.Status.Artifact).To(BeNil(), tc.name)
		ks := &kustomizev1.Kustomization{}
		f.g.Expect(apierrors.IsNotFound(k8sClient.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: tc.name}, ks))).To(BeTrue(),
			"%s: no Kustomization carries the name", tc.name)
		// fixed, it renders
		f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Kustomization = nil })
		f.waitReady(obj)
	}

	// published before its spec named a malformed object: the generated Kustomization stays as
	// it was published, and the name goes into none
	obj := f.waitReady(f.create("published", nil))
	f.update(obj, func(s *kclv1.KCLArtifactSpec) {
		s.Kustomization = &kclv1.KustomizationTemplate{DependsOn: []kustomizev1.DependencyReference{{Name: "infra", Namespace: "flux/system"}}}
	})
	f.waitFor(obj, metav1.ConditionFalse, kclv1.InvalidReferenceReason)
	ks := &kustomizev1.Kustomization{}
	f.g.Expect(k8sClient.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "published"}, ks)).To(Succeed())
	f.g.Expect(ks.Spec.DependsOn).To(BeEmpty(), "the malformed name went into the generated Kustomization")
}
