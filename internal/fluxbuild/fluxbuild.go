// Package fluxbuild turns a directory of manifests into the objects kustomize-controller would
// apply for a Kustomization: the same kustomize generator and build (targetNamespace,
// namePrefix/nameSuffix, patches, images), postBuild substitutions, normalization, commonMetadata
// and the owner labels it adds. render --diff compares these with the cluster, so that what
// kustomize-controller adds is not reported as a change.
package fluxbuild

import (
	"bytes"
	"context"
	"fmt"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	generator "github.com/fluxcd/pkg/kustomize"
	"github.com/fluxcd/pkg/ssa/normalize"
	ssautil "github.com/fluxcd/pkg/ssa/utils"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// OwnerGroup is the group of the labels kustomize-controller puts on what it applies:
// <group>/name and <group>/namespace name the Kustomization.
const OwnerGroup = "kustomize.toolkit.fluxcd.io"

// Build builds dir, a scratch directory the caller owns (a kustomization.yaml is generated into
// it), as kustomize-controller builds a Kustomization's path. The client reads the ConfigMaps and
// Secrets of postBuild.substituteFrom; with a nil client only inline substitutions apply, and
// variables that need a cluster are left as they are.
func Build(ctx context.Context, dir string, ks *kustomizev1.Kustomization, c client.Client) (
	[]*unstructured.Unstructured, error) {
	u, err := asUnstructured(ks)
	if err != nil {
		return nil, err
	}
	if _, err := generator.NewGenerator(dir, u).WriteFile(dir); err != nil {
		return nil, fmt.Errorf("kustomize generate: %w", err)
	}
	m, err := generator.SecureBuild(dir, dir, false)
	if err != nil {
		return nil, fmt.Errorf("kustomize build failed: %w", err)
	}
	for _, res := range m.Resources() {
		if res.GetName() == "" || res.GetKind() == "" || res.GetApiVersion() == "" {
			return nil, fmt.Errorf("failed to decode Kubernetes apiVersion, kind and name from: %v", res.String())
		}
		if ks.Spec.PostBuild == nil {
			continue
		}
		out, err := generator.SubstituteVariables(ctx, c, u, res,
			generator.SubstituteWithDryRun(c == nil),
			generator.SubstituteWithAlways(ks.GetSubstituteStrategy() == kustomizev1.SubstituteStrategyAlways))
		if err != nil {
			return nil, fmt.Errorf("post build failed for '%s/%s': %w", res.GetGvk(), res.GetName(), err)
		}
		if out != nil {
			if _, err := m.Replace(res); err != nil {
				return nil, err
			}
		}
	}
	stream, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build failed: %w", err)
	}
	objs, err := ssautil.ReadObjects(bytes.NewReader(stream))
	if err != nil {
		return nil, err
	}
	if err := normalize.UnstructuredList(objs); err != nil {
		return nil, err
	}
	if cm := ks.Spec.CommonMetadata; cm != nil {
		ssautil.SetCommonMetadata(objs, cm.Labels, cm.Annotations)
	}
	SetOwnerLabels(objs, ks.Name, ks.Namespace)
	return objs, nil
}

// SetOwnerLabels labels objects as applied by the Kustomization namespace/name.
func SetOwnerLabels(objs []*unstructured.Unstructured, name, namespace string) {
	for _, o := range objs {
		labels := o.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[OwnerGroup+"/name"] = name
		labels[OwnerGroup+"/namespace"] = namespace
		o.SetLabels(labels)
	}
}

// asUnstructured is the Kustomization as the generator reads it, with its apiVersion and kind.
func asUnstructured(ks *kustomizev1.Kustomization) (unstructured.Unstructured, error) {
	k := ks.DeepCopy()
	k.APIVersion, k.Kind = kustomizev1.GroupVersion.String(), kustomizev1.KustomizationKind
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(k)
	if err != nil {
		return unstructured.Unstructured{}, err
	}
	return unstructured.Unstructured{Object: m}, nil
}
