package fluxkcl

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

// treeNode is one object of the tree; the JSON and YAML of -o.
type treeNode struct {
	Resource  string     `json:"resource"`
	Resources []treeNode `json:"resources,omitempty"`
}

func (a *app) treeCommand() *cobra.Command {
	var output string
	var stages bool
	cmd := &cobra.Command{
		Use:   "tree [<name>]",
		Short: "Print the objects a KCLArtifact leads to, or the chain of stages it is in",
		Long: `Print, as flux tree does, the chain of a KCLArtifact: its source, the KCLArtifact, its
ExternalArtifact, the Kustomization of each deploy phase and the objects each applied (from the
Kustomizations' inventories).

With --stages, print instead the stages of the namespace (KCLArtifacts with spec.promotion) under
the upstream each follows, e.g. dev → staging → production, or only the chain of <name>: for each
stage the source revision and inputs it runs (status.history), the health of its artifact, its gate
(the Promoted condition) and the artifacts waiting to be published (flux kcl approve takes their
digests).`,
		Example: `  flux kcl tree podinfo -n apps
  flux kcl tree --stages -n apps`,
		Args:              cobra.RangeArgs(0, 1),
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "", "json", "yaml"); err != nil {
				return err
			}
			if len(args) == 0 && !stages {
				return fmt.Errorf("give a KCLArtifact name, or --stages")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
			defer cancel()
			if stages {
				return a.printStages(ctx, args, output)
			}
			root, err := a.buildTree(ctx, args[0])
			if err != nil {
				return err
			}
			if output != "" {
				return a.printData(output, root)
			}
			printTree(a.stdout, root)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "the format in which the tree should be printed: json or yaml")
	cmd.Flags().BoolVar(&stages, "stages", false, "print the chain of stages (spec.promotion) of the namespace, or of <name>")
	return cmd
}

func (a *app) buildTree(ctx context.Context, name string) (treeNode, error) {
	c, err := a.newClient()
	if err != nil {
		return treeNode{}, err
	}
	obj, err := a.getArtifact(ctx, c, name)
	if err != nil {
		return treeNode{}, err
	}
	src, err := sourceRef(obj)
	if err != nil {
		return treeNode{}, err
	}
	art := treeNode{Resource: objectText(kclv1.KCLArtifactKind, obj.Namespace, obj.Name)}
	if r := obj.Status.ExternalArtifactRef; r != nil {
		ea := treeNode{Resource: objectText(externalGVK.Kind, orNamespace(r.Namespace, obj.Namespace), r.Name)}
		if ea.Resources, err = a.kustomizationNodes(ctx, c, obj); err != nil {
			return treeNode{}, err
		}
		art.Resources = []treeNode{ea}
	}
	return treeNode{Resource: objectText(src.gvk.Kind, src.namespace, src.name), Resources: []treeNode{art}}, nil
}

// kustomizationNodes are the generated Kustomizations, in phase order, with what they applied.
func (a *app) kustomizationNodes(ctx context.Context, c client.Client, obj *kclv1.KCLArtifact) ([]treeNode, error) {
	phaseOf := map[string]string{}
	for _, p := range obj.Status.Phases {
		phaseOf[p.Kustomization] = p.Name
	}
	var nodes []treeNode
	for _, name := range generatedKustomizations(obj) {
		n := treeNode{Resource: objectText(kustomizationGVK.Kind, obj.Namespace, name)}
		if phase := phaseOf[name]; phase != "" {
			n.Resource += " (phase " + phase + ")"
		}
		u, err := ref{gvk: kustomizationGVK, namespace: obj.Namespace, name: name}.get(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("Kustomization %s: %w", name, err)
		}
		n.Resources = inventoryNodes(u)
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// inventoryNodes reads kustomize-controller's inventory: ids "<namespace>_<name>_<group>_<kind>".
func inventoryNodes(u *unstructured.Unstructured) []treeNode {
	entries, _, _ := unstructured.NestedSlice(u.Object, "status", "inventory", "entries")
	var nodes []treeNode
	for _, e := range entries {
		m, _ := e.(map[string]any)
		id, _ := m["id"].(string)
		parts := strings.Split(id, "_")
		if len(parts) != 4 {
			continue
		}
		nodes = append(nodes, treeNode{Resource: objectText(parts[3], parts[0], parts[1])})
	}
	return nodes
}

// objectText is flux tree's Kind/namespace/name, Kind/name for cluster-scoped objects.
func objectText(kind, namespace, name string) string {
	if namespace == "" {
		return kind + "/" + name
	}
	return kind + "/" + namespace + "/" + name
}

// printTree draws the tree; names come from inventories and status fields a tenant can write,
// so each node is escaped to one line (-o json and yaml keep them as they are).
func printTree(w io.Writer, root treeNode) {
	fmt.Fprintln(w, termsafe.Line(root.Resource))
	printChildren(w, root.Resources, "")
}

func printChildren(w io.Writer, nodes []treeNode, indent string) {
	for i, n := range nodes {
		branch, next := "├── ", "│   "
		if i == len(nodes)-1 {
			branch, next = "└── ", "    "
		}
		fmt.Fprintln(w, indent+branch+termsafe.Line(n.Resource))
		printChildren(w, n.Resources, indent+next)
	}
}
