package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputexpr"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
	"github.com/kcl-flux/kcl-artifact-controller/internal/yamldiff"
)

// Exports hold nothing derived from a Secret, by construction rather than by comparing text
// (issue 54): a KCLArtifact that reads a Secret exports nothing (exportsRefused), and an export
// expression never sees a rendered Secret's data (exportView). A reader of exports reads only
// KCLArtifacts that read no Secret (arguments.readExports), so nothing derived from a Secret
// travels from one KCLArtifact to another either.

// reconcileExports refuses the exports of a KCLArtifact that reads Secret inputs (exportsRefused):
// nothing is rendered, and exports an earlier release published go.
func (r *KCLArtifactReconciler) reconcileExports(_ context.Context, obj *kclv1.KCLArtifact, _ *pipeline) error {
	if err := exportsRefused(obj); err != nil {
		obj.Status.Exports = nil
		return err
	}
	return nil
}

// exportsRefused refuses the exports of a KCLArtifact that reads Secret inputs: whatever it
// renders may be derived from them, in any encoding (a base64, a reversal, a size, a boolean),
// and status.exports is read by whoever may read the KCLArtifact, and copied by its readers into
// their history, events and diffs. It is stalled: only a change of the spec helps.
func exportsRefused(obj *kclv1.KCLArtifact) error {
	secrets := arguments.SecretInputs(obj)
	if len(obj.Spec.Exports) == 0 || len(secrets) == 0 {
		return nil
	}
	return &kreconcile.Error{Reason: kclv1.ExportFailedReason, Stalled: true, Err: fmt.Errorf(
		"exports are refused: this KCLArtifact reads Secret inputs (argumentsFrom %s), and a value rendered "+
			"from them could reach every reader of its status; export from a KCLArtifact that reads no Secret",
		strings.Join(secrets, ", "))}
}

// renderedExports evaluates spec.exports on a rendered output, before it is stored: an export
// that fails fails the render, and nothing is published.
func renderedExports(ctx context.Context, obj *kclv1.KCLArtifact, output string, maxObjects int, budget time.Duration) ([]kclv1.ExportedValue, error) {
	if len(obj.Spec.Exports) == 0 {
		return nil, nil
	}
	objs, err := manifests.Parse([]byte(output), maxObjects)
	if err != nil {
		return nil, kreconcile.Fail(kclv1.InvalidOutputReason, err)
	}
	return evalExports(ctx, obj, objs, budget)
}

// evalExports evaluates spec.exports over objs, each within budget of wall-clock time
// (--expression-time-budget; 0 is the default), refused for a KCLArtifact that reads Secrets.
func evalExports(ctx context.Context, obj *kclv1.KCLArtifact, objs []*unstructured.Unstructured, budget time.Duration) ([]kclv1.ExportedValue, error) {
	if len(obj.Spec.Exports) == 0 {
		return nil, nil
	}
	if err := exportsRefused(obj); err != nil {
		return nil, err
	}
	list := exportView(objs)
	out := make([]kclv1.ExportedValue, 0, len(obj.Spec.Exports))
	for _, e := range obj.Spec.Exports {
		p, err := inputexpr.Compile(e.Expression, inputexpr.Objects)
		if err != nil {
			return nil, &kreconcile.Error{Reason: kclv1.ExportFailedReason, Stalled: true, Err: fmt.Errorf("export %s: %w", e.Name, err)}
		}
		v, err := p.EvalWithin(ctx, list, budget)
		if err != nil {
			return nil, kreconcile.Failf(kclv1.ExportFailedReason, "export %s: %v", e.Name, err)
		}
		out = append(out, kclv1.ExportedValue{Name: e.Name, Value: v.Text, Literal: v.Literal})
	}
	return out, nil
}

// secretDataFields are the fields of a Secret that hold its values.
var secretDataFields = []string{"data", "stringData"}

// exportView is the rendered objects as export expressions see them: a Secret without its data
// and stringData (its name, type, labels and annotations stay), so that no export reads a
// rendered Secret's value, whatever rendered it.
func exportView(objs []*unstructured.Unstructured) []any {
	list := make([]any, 0, len(objs))
	for _, o := range objs {
		if !yamldiff.IsSecret(o) {
			list = append(list, o.Object)
			continue
		}
		shown := make(map[string]any, len(o.Object))
		for k, v := range o.Object {
			shown[k] = v
		}
		for _, k := range secretDataFields {
			delete(shown, k)
		}
		list = append(list, shown)
	}
	return list
}
