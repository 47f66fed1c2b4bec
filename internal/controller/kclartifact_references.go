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
	var c refCheck
	s := obj.Spec
	c.name("spec.sourceRef.name", s.SourceRef.Name)
	c.namespace("spec.sourceRef.namespace", s.SourceRef.Namespace)
	for i, ref := range s.ArgumentsFrom {
		c.name(fmt.Sprintf("spec.argumentsFrom[%d].name", i), ref.Name)
	}
	if ref := s.RegistrySecretRef; ref != nil {
		c.name("spec.registrySecretRef.name", ref.Name)
	}
	for i, g := range s.GitCredentials {
		c.name(fmt.Sprintf("spec.gitCredentials[%d].secretRef.name", i), g.SecretRef.Name)
	}
	if p := s.Promotion; p != nil {
		c.name("spec.promotion.from.name", p.From.Name)
		c.namespace("spec.promotion.from.namespace", p.From.Namespace)
	}
	if k := s.Kustomization; k != nil {
		c.kustomization(k)
	}
	if len(c.bad) == 0 {
		return nil
	}
	return kreconcile.Stall(kclv1.InvalidReferenceReason, fmt.Errorf(
		"%s: nothing is read or published until the spec names valid objects", strings.Join(c.bad, "; ")))
}

// refCheck collects what a spec names wrongly.
type refCheck struct{ bad []string }

// kustomization checks the names spec.kustomization gives the generated Kustomization.
func (c *refCheck) kustomization(k *kclv1.KustomizationTemplate) {
	c.name("spec.kustomization.serviceAccountName", k.ServiceAccountName)
	c.namespace("spec.kustomization.targetNamespace", k.TargetNamespace)
	if kc := k.KubeConfig; kc != nil {
		if kc.SecretRef != nil {
			c.name("spec.kustomization.kubeConfig.secretRef.name", kc.SecretRef.Name)
		}
		if kc.ConfigMapRef != nil {
			c.name("spec.kustomization.kubeConfig.configMapRef.name", kc.ConfigMapRef.Name)
		}
	}
	if d := k.Decryption; d != nil {
		if d.SecretRef != nil {
			c.name("spec.kustomization.decryption.secretRef.name", d.SecretRef.Name)
		}
		c.name("spec.kustomization.decryption.serviceAccountName", d.ServiceAccountName)
	}
	for i, d := range k.DependsOn {
		c.name(fmt.Sprintf("spec.kustomization.dependsOn[%d].name", i), d.Name)
		c.namespace(fmt.Sprintf("spec.kustomization.dependsOn[%d].namespace", i), d.Namespace)
	}
	for i, h := range k.HealthChecks {
		c.name(fmt.Sprintf("spec.kustomization.healthChecks[%d].name", i), h.Name)
		c.namespace(fmt.Sprintf("spec.kustomization.healthChecks[%d].namespace", i), h.Namespace)
	}
	if pb := k.PostBuild; pb != nil {
		for i, r := range pb.SubstituteFrom {
			c.name(fmt.Sprintf("spec.kustomization.postBuild.substituteFrom[%d].name", i), r.Name)
		}
	}
}

// name checks an object's name; only the source's may not be empty.
func (c *refCheck) name(field, value string) { c.check(field, value, false) }

// namespace checks a namespace's name.
func (c *refCheck) namespace(field, value string) { c.check(field, value, true) }

func (c *refCheck) check(field, value string, label bool) {
	if value == "" && field != "spec.sourceRef.name" {
		return
	}
	errs, what := validation.IsDNS1123Subdomain(value), "an object's name"
	if label {
		errs, what = validation.IsDNS1123Label(value), "a namespace's name"
	}
	if len(errs) > 0 {
		c.bad = append(c.bad, fmt.Sprintf("%s %q is not %s (%s)", field, value, what, strings.Join(errs, "; ")))
	}
}
