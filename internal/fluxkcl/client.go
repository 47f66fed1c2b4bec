package fluxkcl

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// crdName names the CRD in the error a cluster without it gives.
const crdName = "kclartifacts.kcl.contrib.fluxcd.io"

// newClient is a controller-runtime client for KCLArtifacts and core objects; the Flux kinds
// (sources, Kustomizations) are read as unstructured objects, so that any served version works.
func (a *app) newClient() (client.Client, error) {
	cfg, err := a.restConfig()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: newScheme()})
}

// newScheme knows the core kinds and KCLArtifacts.
func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kclv1.AddToScheme(scheme))
	return scheme
}

// namespace is -n, or "" (every namespace) with -A.
func (a *app) namespace() string {
	if a.allNamespaces {
		return ""
	}
	return *a.kube.Namespace
}

// namespaceText is how flux names the namespace in its messages.
func namespaceText(ns string) string {
	if ns == "" {
		return "any"
	}
	return ns
}

// getArtifact reads one KCLArtifact in -n, with flux's message when it does not exist.
func (a *app) getArtifact(ctx context.Context, c client.Client, name string) (*kclv1.KCLArtifact, error) {
	obj := &kclv1.KCLArtifact{}
	err := c.Get(ctx, client.ObjectKey{Namespace: *a.kube.Namespace, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("KCLArtifact object '%s' not found in %s namespace", name, *a.kube.Namespace)
	}
	return obj, clusterError(err)
}

// clientAndArtifact is a client of the cluster and the KCLArtifact name in -n, which most verbs
// start from.
func (a *app) clientAndArtifact(ctx context.Context, name string) (client.Client, *kclv1.KCLArtifact, error) {
	c, err := a.newClient()
	if err != nil {
		return nil, nil, err
	}
	obj, err := a.getArtifact(ctx, c, name)
	return c, obj, err
}

// clusterError names the missing CRD instead of the API's "no matches for kind".
func clusterError(err error) error {
	if err != nil && apimeta.IsNoMatchError(err) {
		return fmt.Errorf("the KCLArtifact CRD (%s) is not installed in the cluster: install kcl-artifact-controller", crdName)
	}
	return err
}
