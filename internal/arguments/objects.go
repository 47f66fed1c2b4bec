package arguments

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputexpr"
)

// readObject reads values of an object of a kind the operator allows, each with an expression
// or a field path. A kind not allowed is refused before anything is read.
func (g *Gatherer) readObject(ctx context.Context, ns string, ref kclv1.ArgumentsReference) (map[string]argument, error) {
	gvk, err := g.Kinds.lookup(ref)
	if err != nil {
		return nil, err
	}
	progs, err := compileValues(ref)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	err = g.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: ref.Name}, u)
	if apierrors.IsNotFound(err) {
		if ref.Optional {
			return nil, nil
		}
		return nil, refError(kclv1.ArgumentsFailedReason, ref, "not found in namespace %s", ns)
	}
	if err != nil {
		return nil, fmt.Errorf("argumentsFrom %s %s: %w", ref.Kind, ref.Name, err)
	}
	out := make(map[string]argument, len(progs))
	for i, p := range progs {
		v, err := p.EvalWithin(ctx, u.Object, g.ExpressionBudget)
		if err != nil {
			return nil, refError(kclv1.ArgumentsFailedReason, ref, "value %s: %v", ref.Values[i].Name, err)
		}
		out[ref.Values[i].Name] = argument{value: v.Literal, text: v.Text}
	}
	return out, nil
}

// compileValues compiles the values' expressions (a field path becomes one); a mistake in one
// is the spec's, which only a new generation fixes.
func compileValues(ref kclv1.ArgumentsReference) ([]*inputexpr.Program, error) {
	progs := make([]*inputexpr.Program, 0, len(ref.Values))
	for _, v := range ref.Values {
		expr := v.Expression
		var err error
		switch {
		case (expr == "") == (v.FieldPath == ""):
			err = fmt.Errorf("set one of expression and fieldPath")
		case v.FieldPath != "":
			expr, err = inputexpr.FieldPath(v.FieldPath)
		}
		var p *inputexpr.Program
		if err == nil {
			p, err = inputexpr.Compile(expr, inputexpr.Object)
		}
		if err != nil {
			return nil, &Error{Reason: kclv1.ArgumentsFailedReason, Stalled: true,
				Err: fmt.Errorf("argumentsFrom %s %s: value %s: %w", ref.Kind, ref.Name, v.Name, err)}
		}
		progs = append(progs, p)
	}
	return progs, nil
}
