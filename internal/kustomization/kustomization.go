// Package kustomization is the Flux Kustomization this controller generates for a KCLArtifact:
// its name per deploy phase and its spec from the template. The controller applies it; render
// --diff builds with it when there is no cluster to read it from.
package kustomization

import (
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
)

// GeneratedLabel marks the objects the controller generates for a KCLArtifact (its
// ExternalArtifact and Kustomizations), with the KCLArtifact's name.
const GeneratedLabel = "kcl.contrib.fluxcd.io/name"

// Name is the name of the Kustomization that applies a phase: the KCLArtifact's for main,
// <name>-pre and <name>-post for the others, and <name>-pre-rollback and <name>-post-rollback
// for the rollback phases an artifact holds apart. Those are other Kustomizations than a deploy's,
// so that switching between them never has kustomize-controller apply one phase's directory
// with the other's spec.
func Name(obj *kclv1.KCLArtifact, p phases.Phase) string {
	switch p {
	case phases.Main:
		return obj.GetName()
	case phases.RollbackPre:
		return obj.GetName() + "-pre-rollback"
	case phases.RollbackPost:
		return obj.GetName() + "-post-rollback"
	}
	return obj.GetName() + "-" + string(p)
}

// Spec renders the template into a Kustomization spec applying the ExternalArtifact. The whole
// spec is the controller's, suspend included: `flux suspend kustomization` on a generated object
// is reverted, and spec.kustomization.suspend suspends it.
func Spec(obj *kclv1.KCLArtifact) kustomizev1.KustomizationSpec {
	t := obj.Spec.Kustomization
	if t == nil {
		t = &kclv1.KustomizationTemplate{}
	}
	prune := true
	if t.Prune != nil {
		prune = *t.Prune
	}
	interval := obj.Spec.Interval
	if t.Interval != nil {
		interval = *t.Interval
	}
	// An apply that failed on something passing (the API server restarting) is tried again as
	// soon as a failed render would be, not after the whole interval.
	retry := t.RetryInterval
	if retry == nil {
		retry = obj.Spec.RetryInterval
	}
	return kustomizev1.KustomizationSpec{
		SourceRef: kustomizev1.CrossNamespaceSourceReference{
			Kind: sourcev1.ExternalArtifactKind, Name: obj.GetName(), Namespace: obj.GetNamespace(),
		},
		Path: "./", Suspend: t.Suspend, Interval: interval, RetryInterval: retry, Timeout: t.Timeout,
		Prune: prune, DeletionPolicy: t.DeletionPolicy, Wait: t.Wait, Force: t.Force,
		HealthChecks: t.HealthChecks, HealthCheckExprs: t.HealthCheckExprs,
		TargetNamespace: t.TargetNamespace, ServiceAccountName: t.ServiceAccountName,
		DependsOn: t.DependsOn, CommonMetadata: t.CommonMetadata, NamePrefix: t.NamePrefix,
		NameSuffix: t.NameSuffix, Patches: t.Patches, Images: t.Images, PostBuild: t.PostBuild,
		Decryption: t.Decryption, KubeConfig: t.KubeConfig,
	}
}
