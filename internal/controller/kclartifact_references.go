package controller

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
)

// checkReferences refuses a spec that names an object by a name no Kubernetes object can have
// (`vic/creds`, `../x`, upper case, over 253 bytes) or a namespace by one no namespace can have.
// The CRD refuses such names at admission; an object stored before it did, or a field of Flux's
// types the CRD cannot check within its cost budget (dependsOn, healthChecks,
// postBuild.substituteFrom), gets here. It is stalled: reading or retrying cannot help, and the
// name would go on into a request or a generated Kustomization.
func checkReferences(obj *kclv1.KCLArtifact) error {
	var bad []string
	check := func(field, value string, label bool) {
		if value == "" && field != "spec.sourceRef.name" {
			return
		}
		errs := validation.IsDNS1123Subdomain(value)
		what := "an object's name"
		if label {
			errs, what = validation.IsDNS1123Label(value), "a namespace's name"
		}
		if len(errs) > 0 {
			bad = append(bad, fmt.Sprintf("%s %q is not %s (%s)", field, value, what, strings.Join(errs, "; ")))
		}
	}
	name := func(field, value string) { check(field, value, false) }
	namespace := func(field, value string) { check(field, value, true) }
	s := obj.Spec
	name("spec.sourceRef.name", s.SourceRef.Name)
	namespace("spec.sourceRef.namespace", s.SourceRef.Namespace)
	for i, ref := range s.ArgumentsFrom {
		name(fmt.Sprintf("spec.argumentsFrom[%d].name", i), ref.Name)
	}
	if ref := s.RegistrySecretRef; ref != nil {
		name("spec.registrySecretRef.name", ref.Name)
	}
	for i, c := range s.GitCredentials {
		name(fmt.Sprintf("spec.gitCredentials[%d].secretRef.name", i), c.SecretRef.Name)
	}
	if p := s.Promotion; p != nil {
		name("spec.promotion.from.name", p.From.Name)
		namespace("spec.promotion.from.namespace", p.From.Namespace)
	}
	if k := s.Kustomization; k != nil {
		name("spec.kustomization.serviceAccountName", k.ServiceAccountName)
		namespace("spec.kustomization.targetNamespace", k.TargetNamespace)
		if kc := k.KubeConfig; kc != nil {
			if kc.SecretRef != nil {
				name("spec.kustomization.kubeConfig.secretRef.name", kc.SecretRef.Name)
			}
			if kc.ConfigMapRef != nil {
				name("spec.kustomization.kubeConfig.configMapRef.name", kc.ConfigMapRef.Name)
			}
		}
		if d := k.Decryption; d != nil {
			if d.SecretRef != nil {
				name("spec.kustomization.decryption.secretRef.name", d.SecretRef.Name)
			}
			name("spec.kustomization.decryption.serviceAccountName", d.ServiceAccountName)
		}
		for i, d := range k.DependsOn {
			name(fmt.Sprintf("spec.kustomization.dependsOn[%d].name", i), d.Name)
			namespace(fmt.Sprintf("spec.kustomization.dependsOn[%d].namespace", i), d.Namespace)
		}
		for i, h := range k.HealthChecks {
			name(fmt.Sprintf("spec.kustomization.healthChecks[%d].name", i), h.Name)
			namespace(fmt.Sprintf("spec.kustomization.healthChecks[%d].namespace", i), h.Namespace)
		}
		if pb := k.PostBuild; pb != nil {
			for i, r := range pb.SubstituteFrom {
				name(fmt.Sprintf("spec.kustomization.postBuild.substituteFrom[%d].name", i), r.Name)
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return &kreconcile.Error{Reason: kclv1.InvalidReferenceReason, Stalled: true, Err: fmt.Errorf(
		"%s: nothing is read or published until the spec names valid objects", strings.Join(bad, "; "))}
}
