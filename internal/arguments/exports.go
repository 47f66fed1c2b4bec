package arguments

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// maxExportChain bounds the walk that looks for a cycle: longer chains are refused as well.
const maxExportChain = 16

// readExports reads the exports of another KCLArtifact of the namespace, as its published
// artifact has them.
func (g *Gatherer) readExports(ctx context.Context, obj *kclv1.KCLArtifact, ref kclv1.ArgumentsReference) (map[string]argument, error) {
	if err := g.checkCycle(ctx, obj, ref.Name); err != nil {
		return nil, err
	}
	from := &kclv1.KCLArtifact{}
	err := g.Reader.Get(ctx, types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}, from)
	if apierrors.IsNotFound(err) {
		if ref.Optional {
			return nil, nil
		}
		return nil, refError(kclv1.InputNotReadyReason, ref, "not found in namespace %s", obj.GetNamespace())
	}
	if err != nil {
		return nil, fmt.Errorf("argumentsFrom KCLArtifact %s: %w", ref.Name, err)
	}
	if secrets := SecretInputs(from); len(secrets) > 0 {
		// the controller publishes no exports of it (an earlier release did, or its status was
		// written by hand): whatever it renders may be derived from its Secrets
		return nil, refError(kclv1.InputNotReadyReason, ref, "reads Secret inputs (argumentsFrom %s): its exports are refused, "+
			"as a value rendered from them could reach every reader of this KCLArtifact", strings.Join(secrets, ", "))
	}
	exported := map[string]kclv1.ExportedValue{}
	for _, e := range from.Status.Exports {
		exported[e.Name] = e
	}
	names := ref.Keys
	if len(names) == 0 {
		if len(from.Status.Exports) == 0 && !ref.Optional {
			return nil, refError(kclv1.InputNotReadyReason, ref, "has exported nothing yet")
		}
		for n := range exported {
			names = append(names, n)
		}
	}
	out := map[string]argument{}
	for _, n := range names {
		e, ok := exported[n]
		switch {
		case ok:
			out[n] = argument{value: e.Literal, text: e.Value}
		case !ref.Optional:
			return nil, refError(kclv1.InputNotReadyReason, ref, "has not exported %q (it exports: %s)", n, exportNames(from))
		}
	}
	return out, nil
}

func exportNames(obj *kclv1.KCLArtifact) string {
	var n []string
	for _, e := range obj.Status.Exports {
		n = append(n, e.Name)
	}
	if len(n) == 0 {
		return "nothing yet"
	}
	return strings.Join(n, ", ")
}

// checkCycle walks the exports obj would read from next, depth first, and refuses a chain that
// comes back to obj, naming it: each would wait for the other's new artifact forever.
func (g *Gatherer) checkCycle(ctx context.Context, obj *kclv1.KCLArtifact, next string) error {
	chain := []string{obj.GetName(), next}
	return g.walk(ctx, obj.GetNamespace(), chain, map[string]bool{})
}

func (g *Gatherer) walk(ctx context.Context, ns string, chain []string, done map[string]bool) error {
	last := chain[len(chain)-1]
	if last == chain[0] {
		return &Error{Reason: kclv1.ExportCycleReason, Err: fmt.Errorf(
			"argumentsFrom KCLArtifact: the exports form a cycle: %s", strings.Join(chain, " → "))}
	}
	if done[last] {
		return nil
	}
	if len(chain) > maxExportChain {
		return &Error{Reason: kclv1.ExportCycleReason, Err: fmt.Errorf(
			"argumentsFrom KCLArtifact: the chain of exports is longer than %d: %s", maxExportChain, strings.Join(chain, " → "))}
	}
	done[last] = true
	o := &kclv1.KCLArtifact{}
	if err := g.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: last}, o); err != nil {
		return client404(err)
	}
	for _, ref := range o.Spec.ArgumentsFrom {
		// every name of the chain but its first is done: only a way back to the first goes on
		if ReadsExports(ref) {
			if err := g.walk(ctx, ns, append(slices.Clip(chain), ref.Name), done); err != nil {
				return err
			}
		}
	}
	return nil
}

// ReadsExports tells whether ref reads another KCLArtifact's exports.
func ReadsExports(ref kclv1.ArgumentsReference) bool { return builtin(ref) == kclv1.KCLArtifactKind }

// client404 ignores a KCLArtifact of the chain that does not exist: it reads nothing.
func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
