package fluxkcl

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// sourceGroupVersion is the default of spec.sourceRef.apiVersion.
const sourceGroupVersion = "source.toolkit.fluxcd.io/v1"

func (a *app) reconcileCommand() *cobra.Command {
	var withSource bool
	cmd := &cobra.Command{
		Use:   "reconcile <name>",
		Short: "Reconcile a KCLArtifact and apply what it renders",
		Long: `Reconcile a KCLArtifact as flux reconcile kustomization --with-source does: request its source
(with --with-source), then the KCLArtifact, then the Kustomizations it generates (one per deploy
phase, in order), waiting for each to handle the request, and print the revision rendered and
applied. An ExternalArtifact source cannot be requested: its producer updates it.`,
		Example:           `  flux kcl reconcile podinfo -n apps --with-source`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
			defer cancel()
			return a.reconcile(ctx, args[0], withSource)
		},
	}
	cmd.Flags().BoolVar(&withSource, "with-source", false, "reconcile the source first")
	return cmd
}

func (a *app) reconcile(ctx context.Context, name string, withSource bool) error {
	c, obj, err := a.clientAndArtifact(ctx, name)
	if err != nil {
		return err
	}
	if obj.Spec.Suspend {
		return fmt.Errorf("KCLArtifact %s in %s namespace is suspended: flux kcl resume %s first", name, obj.Namespace, name)
	}
	if withSource {
		if err := a.reconcileSource(ctx, c, obj); err != nil {
			return err
		}
	}
	if err := a.reconcileArtifact(ctx, c, obj); err != nil {
		return err
	}
	return a.reconcileKustomizations(ctx, c, obj)
}

// sourceRef is the KCLArtifact's source as a ref.
func sourceRef(obj *kclv1.KCLArtifact) (ref, error) {
	s := obj.Spec.SourceRef
	apiVersion := s.APIVersion
	if apiVersion == "" {
		apiVersion = sourceGroupVersion
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return ref{}, err
	}
	return ref{gvk: gv.WithKind(s.Kind), namespace: orNamespace(s.Namespace, obj.Namespace), name: s.Name}, nil
}

func (a *app) reconcileSource(ctx context.Context, c client.Client, obj *kclv1.KCLArtifact) error {
	src, err := sourceRef(obj)
	if err != nil {
		return err
	}
	if src.gvk.Kind == externalGVK.Kind {
		a.log.Warningf("source %s/%s/%s cannot be requested to reconcile: its producer updates it", src.gvk.Kind, src.namespace, src.name)
		return nil
	}
	u, err := src.get(ctx, c)
	if err != nil {
		return fmt.Errorf("source %s/%s/%s: %w", src.gvk.Kind, src.namespace, src.name, err)
	}
	if suspended, _, _ := unstructured.NestedBool(u.Object, "spec", "suspend"); suspended {
		return fmt.Errorf("source %s %s in %s namespace is suspended", src.gvk.Kind, src.name, src.namespace)
	}
	u, err = a.requestAndWait(ctx, c, src)
	if err != nil {
		return err
	}
	a.log.Successf("fetched revision %s", statusString(u, "artifact", "revision"))
	return nil
}

func (a *app) reconcileArtifact(ctx context.Context, c client.Client, obj *kclv1.KCLArtifact) error {
	r := ref{gvk: kclartifactGVK, namespace: obj.Namespace, name: obj.Name}
	u, err := a.requestAndWait(ctx, c, r)
	if err != nil {
		return err
	}
	a.log.Successf("rendered revision %s from %s", statusString(u, "artifact", "revision"), statusString(u, "sourceRevision"))
	return nil
}

// reconcileKustomizations requests the generated Kustomizations in phase order, since each
// phase depends on the one before it.
func (a *app) reconcileKustomizations(ctx context.Context, c client.Client, obj *kclv1.KCLArtifact) error {
	// read again: the render may have changed the phases
	obj, err := a.getArtifact(ctx, c, obj.Name)
	if err != nil {
		return err
	}
	names := generatedKustomizations(obj)
	if len(names) == 0 {
		a.log.Successf("no Kustomization generated (spec.kustomization.disabled)")
		return nil
	}
	for _, name := range names {
		u, err := a.requestAndWait(ctx, c, ref{gvk: kustomizationGVK, namespace: obj.Namespace, name: name})
		if err != nil {
			return err
		}
		a.log.Successf("applied revision %s (origin %s)", statusString(u, "lastAppliedRevision"), statusString(u, "lastAppliedOriginRevision"))
	}
	return nil
}

// requestAndWait prints flux reconcile's lines around a request.
func (a *app) requestAndWait(ctx context.Context, c client.Client, r ref) (*unstructured.Unstructured, error) {
	a.log.Actionf("annotating %s %s in %s namespace", r.gvk.Kind, r.name, r.namespace)
	before, err := requestReconcile(ctx, c, r)
	if err != nil {
		return nil, err
	}
	a.log.Successf("%s annotated", r.gvk.Kind)
	a.log.Waitingf("waiting for %s reconciliation", r.gvk.Kind)
	return waitHandled(ctx, c, r, before)
}

// generatedKustomizations are the Kustomizations of the deploy phases in order, or the one
// Kustomization when the artifact has a single phase.
func generatedKustomizations(obj *kclv1.KCLArtifact) []string {
	var names []string
	for _, p := range obj.Status.Phases {
		if p.Kustomization != "" {
			names = append(names, p.Kustomization)
		}
	}
	if len(names) == 0 && obj.Status.KustomizationRef != nil {
		names = append(names, obj.Status.KustomizationRef.Name)
	}
	return names
}
