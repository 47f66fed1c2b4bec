package controller

import (
	"errors"
	"strings"
	"testing"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
)

// An object stored before the CRD had its patterns (`argumentsFrom` `vic/creds`, issue 54) is
// stalled with every bad name at once, never retried: before, it was a transient Failed retried
// with backoff forever. Valid names, and absent optional ones, pass.
func TestCheckReferences(t *testing.T) {
	obj := &kclv1.KCLArtifact{Spec: kclv1.KCLArtifactSpec{
		SourceRef:     kclv1.SourceReference{Kind: "GitRepository", Name: "repo", Namespace: "Tenant_B"},
		ArgumentsFrom: []kclv1.ArgumentsReference{{Kind: "ConfigMap", Name: "ok.v1"}, {Kind: "Secret", Name: "vic/creds"}},
		Promotion:     &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "dev"}},
		Kustomization: &kclv1.KustomizationTemplate{ServiceAccountName: "deployer",
			KubeConfig: &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: "../kubeconfig"}},
			DependsOn:  []kustomizev1.DependencyReference{{Name: "infra"}}},
	}}
	err := checkReferences(obj)
	var se *kreconcile.Error
	if !errors.As(err, &se) || se.Reason != kclv1.InvalidReferenceReason || !se.Stalled {
		t.Fatalf("%v: want stalled InvalidReference", err)
	}
	for _, want := range []string{
		`spec.sourceRef.namespace "Tenant_B" is not a namespace's name (a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'`,
		`spec.argumentsFrom[1].name "vic/creds" is not an object's name (a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'`,
		`spec.kustomization.kubeConfig.secretRef.name "../kubeconfig" is not an object's name`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nwant %s", err, want)
		}
	}
	for _, ok := range []string{"ok.v1", "infra", "deployer", `"repo"`, "dev"} {
		if strings.Contains(err.Error(), ok) {
			t.Errorf("%v names the valid %s", err, ok)
		}
	}
	obj.Spec.SourceRef.Namespace, obj.Spec.ArgumentsFrom[1].Name = "", "creds"
	obj.Spec.Kustomization.KubeConfig.SecretRef.Name = "kubeconfig"
	if err := checkReferences(obj); err != nil {
		t.Errorf("valid names: %v", err)
	}
}
