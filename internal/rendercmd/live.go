package rendercmd

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/fluxcd/cli-utils/pkg/object"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fluxbuild"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kustomization"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
)

// pruneAnnotation opts an object out of kustomize-controller's garbage collection.
const pruneAnnotation = fluxbuild.OwnerGroup + "/prune"

// kclArtifactObjects renders a KCLArtifact of the cluster (or of a manifest file, with the
// cluster's argumentsFrom) and returns what its Kustomizations would apply, and the live objects
// they would prune.
func (c *cluster) kclArtifactObjects(ctx context.Context, f flags, log io.Writer) (
	objs, pruned []*unstructured.Unstructured, err error) {
	obj, err := c.kclArtifact(ctx, f)
	if err != nil {
		return nil, nil, err
	}
	live := c.liveKustomizations(ctx, obj, log)
	objs, err = kclArtifactApplied(ctx, f, obj, f.sourceDir, c.client, live.of, log)
	if err != nil {
		return nil, nil, err
	}
	pruned, err = c.pruned(ctx, live, objs, phases.Phase(f.phase), log)
	return objs, pruned, err
}

func (c *cluster) kclArtifact(ctx context.Context, f flags) (*kclv1.KCLArtifact, error) {
	// a manifest without a namespace is in the one --kclartifact names, else the context's
	if f.kclArtifactFile != "" {
		return readKCLArtifactFileFound(f.kclArtifactFile, f.kclArtifact, namespaceOf(f.kclArtifact, c.namespace))
	}
	key := types.NamespacedName{Namespace: c.namespace, Name: f.kclArtifact}
	if ns, name, ok := strings.Cut(f.kclArtifact, "/"); ok {
		key = types.NamespacedName{Namespace: ns, Name: name}
	}
	obj := &kclv1.KCLArtifact{}
	switch err := c.client.Get(ctx, key, obj); {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("KCLArtifact %s not found", key)
	case meta.IsNoMatchError(err):
		return nil, fmt.Errorf("KCLArtifact %s: the cluster does not serve KCLArtifacts (is kcl-artifact-controller's CRD installed?)", key)
	case err != nil:
		return nil, fmt.Errorf("KCLArtifact %s: %w", key, err)
	}
	return obj, nil
}

// readKCLArtifactFileFound is readKCLArtifactFile for a file that must exist.
func readKCLArtifactFileFound(path, want, namespace string) (*kclv1.KCLArtifact, error) {
	obj, err := readKCLArtifactFile(path, want, namespace)
	if err == nil && obj == nil {
		err = fmt.Errorf("--kclartifact-file %s does not exist", path)
	}
	return obj, err
}

// generatedKustomizations are a KCLArtifact's Kustomizations as the cluster has them, per phase.
type generatedKustomizations struct {
	obj  *kclv1.KCLArtifact
	live map[phases.Phase]*kustomizev1.Kustomization
}

// liveKustomizations reads the generated Kustomizations of every phase. A phase without one (a
// KCLArtifact not reconciled yet, a phase added by the change) builds with the template's.
func (c *cluster) liveKustomizations(ctx context.Context, obj *kclv1.KCLArtifact, log io.Writer) *generatedKustomizations {
	g := &generatedKustomizations{obj: obj, live: map[phases.Phase]*kustomizev1.Kustomization{}}
	if t := obj.Spec.Kustomization; t != nil && t.Disabled {
		fmt.Fprintf(log, "KCLArtifact %s/%s generates no Kustomization: the objects are compared as rendered\n",
			obj.Namespace, obj.Name)
		return g
	}
	for _, p := range phases.All {
		ks := &kustomizev1.Kustomization{}
		key := types.NamespacedName{Namespace: obj.Namespace, Name: kustomization.Name(obj, p)}
		err := c.client.Get(ctx, key, ks)
		switch {
		case err == nil && ks.Labels[kustomization.GeneratedLabel] == obj.Name:
			g.live[p] = ks
		case err != nil && !apierrors.IsNotFound(err):
			fmt.Fprintf(log, "Kustomization %s: %v; building with the KCLArtifact's template\n", key, err)
		}
	}
	return g
}

func (g *generatedKustomizations) of(p phases.Phase) (*kustomizev1.Kustomization, error) {
	if ks := g.live[p]; ks != nil {
		return ks, nil
	}
	return fromTemplate(g.obj)(p)
}

// pruned returns the live objects the Kustomizations applied last and would now delete: in their
// inventory, not among objs, and not opted out of pruning. A Kustomization with prune off
// deletes nothing; that is said on log.
func (c *cluster) pruned(ctx context.Context, g *generatedKustomizations, objs []*unstructured.Unstructured,
	only phases.Phase, log io.Writer) ([]*unstructured.Unstructured, error) {
	keep := map[string]bool{}
	for _, o := range objs {
		keep[object.UnstructuredToObjMetadata(o).String()] = true
	}
	var out []*unstructured.Unstructured
	for _, p := range phases.All {
		ks := g.live[p]
		if ks == nil || ks.Status.Inventory == nil || (only != "" && p != only) {
			continue
		}
		for _, e := range ks.Status.Inventory.Entries {
			if keep[e.ID] {
				continue
			}
			o, err := c.inventoryObject(ctx, e)
			if err != nil {
				return nil, err
			}
			if o == nil {
				continue
			}
			switch {
			case !ks.Spec.Prune:
				fmt.Fprintf(log, "%s/%s stays in the cluster: Kustomization %s has prune: false\n",
					o.GetKind(), o.GetName(), ks.Name)
			case o.GetAnnotations()[pruneAnnotation] == "disabled" || o.GetLabels()[pruneAnnotation] == "disabled":
				fmt.Fprintf(log, "%s/%s stays in the cluster: %s: disabled\n", o.GetKind(), o.GetName(), pruneAnnotation)
			default:
				out = append(out, strip(o))
			}
		}
	}
	return out, nil
}

// inventoryObject reads the live object of an inventory entry: nil when it is already gone.
func (c *cluster) inventoryObject(ctx context.Context, e kustomizev1.ResourceRef) (*unstructured.Unstructured, error) {
	m, err := object.ParseObjMetadata(e.ID)
	if err != nil {
		return nil, fmt.Errorf("inventory entry %q: %w", e.ID, err)
	}
	o := &unstructured.Unstructured{}
	o.SetGroupVersionKind(m.GroupKind.WithVersion(e.Version))
	err = c.client.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: m.Name}, o)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s/%s: %w", m.GroupKind.Kind, m.Namespace, m.Name, err)
	}
	return o, nil
}
