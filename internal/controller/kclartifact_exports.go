package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputexpr"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
)

// renderedExports evaluates spec.exports on a rendered output, before it is stored: an export
// that fails fails the render, and nothing is published.
func renderedExports(ctx context.Context, obj *kclv1.KCLArtifact, output string, maxObjects int, secretValues []string, budget time.Duration) ([]kclv1.ExportedValue, error) {
	if len(obj.Spec.Exports) == 0 {
		return nil, nil
	}
	objs, err := manifests.Parse([]byte(output), maxObjects)
	if err != nil {
		return nil, fail(kclv1.InvalidOutputReason, err)
	}
	return evalExports(ctx, obj, objs, secretValues, budget)
}

// evalExports evaluates spec.exports over objs, each within budget of wall-clock time
// (--expression-time-budget; 0 is the default). A value holding one read from a Secret is
// refused: status is read by whoever may read the KCLArtifact.
func evalExports(ctx context.Context, obj *kclv1.KCLArtifact, objs []*unstructured.Unstructured, secretValues []string, budget time.Duration) ([]kclv1.ExportedValue, error) {
	if len(obj.Spec.Exports) == 0 {
		return nil, nil
	}
	list := make([]any, 0, len(objs))
	for _, o := range objs {
		list = append(list, o.Object)
	}
	out := make([]kclv1.ExportedValue, 0, len(obj.Spec.Exports))
	for _, e := range obj.Spec.Exports {
		p, err := inputexpr.Compile(e.Expression, inputexpr.Objects)
		if err != nil {
			return nil, &stepError{reason: kclv1.ExportFailedReason, stalled: true, err: fmt.Errorf("export %s: %w", e.Name, err)}
		}
		v, err := p.EvalWithin(ctx, list, budget)
		if err != nil {
			return nil, failf(kclv1.ExportFailedReason, "export %s: %v", e.Name, err)
		}
		for _, s := range secretValues {
			if s != "" && strings.Contains(v.Text, s) {
				return nil, &stepError{reason: kclv1.ExportFailedReason, stalled: true, err: fmt.Errorf(
					"export %s: its value holds a value read from a Secret, and exports are published in status", e.Name)}
			}
		}
		out = append(out, kclv1.ExportedValue{Name: e.Name, Value: v.Text, Literal: v.Literal})
	}
	return out, nil
}
