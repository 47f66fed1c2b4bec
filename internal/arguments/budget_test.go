package arguments

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// objectReader answers every Get with a copy of obj.
type objectReader struct {
	client.Reader
	obj map[string]any
}

func (r objectReader) Get(_ context.Context, _ client.ObjectKey, o client.Object, _ ...client.GetOption) error {
	o.(*unstructured.Unstructured).Object = r.obj
	return nil
}

// TestExpressionBudgetIsTheGatherers: argumentsFrom values run within the Gatherer's budget
// (--expression-time-budget), and a budget overrun is retried, as the cost limit's is: not stalled.
func TestExpressionBudgetIsTheGatherers(t *testing.T) {
	kinds, _ := ParseKinds([]string{"v1/Service"})
	svc := map[string]any{"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "db", "annotations": map[string]any{"z": strings.Repeat("1", 60_000)}}}
	thousand := "[" + strings.TrimSuffix(strings.Repeat("0,", 1000), ",") + "]"
	bomb := thousand + ".all(i, " + thousand + ".all(j, double(object.metadata.annotations.z) > 0.0))"
	obj := &kclv1.KCLArtifact{}
	obj.Namespace, obj.Name = "tenant", "app"
	obj.Spec.ArgumentsFrom = []kclv1.ArgumentsReference{{APIVersion: "v1", Kind: "Service", Name: "db",
		Values: []kclv1.ArgumentValue{{Name: "z", Expression: bomb}}}}
	g := &Gatherer{Reader: objectReader{obj: svc}, Kinds: kinds, ExpressionBudget: time.Millisecond}
	start := time.Now()
	_, err := g.Gather(context.Background(), obj)
	e := AsError(err)
	want := "argumentsFrom Service db: value z: the expression was stopped: it exceeded its time budget of 1ms"
	if e == nil || e.Reason != kclv1.ArgumentsFailedReason || e.Stalled || err.Error() != want {
		t.Fatalf("Gather = %v (%+v); want %q, retried", err, e, want)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("stopped after %v", took)
	}
}
