package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// Export expressions are bounded as argumentsFrom values are (issue 54): a string over the cap,
// the cost limit and the time budget (Bounds.ExpressionBudget) each fail the export
// (ExportFailed), retried as the cost limit's error always was: not stalled.
func TestExportExpressionsAreBounded(t *testing.T) {
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "conf"},
		"data":     map[string]any{"big": strings.Repeat("1", 100_000), "near": strings.Repeat("1", 60_000)}}}
	thousand := "[" + strings.TrimSuffix(strings.Repeat("0,", 1000), ",") + "]"
	bomb := thousand + ".all(i, " + thousand + ".all(j, double(objects[0].data.near) > 0.0))"
	for _, tc := range []struct {
		expr   string
		budget time.Duration
		want   string
	}{
		{`objects[0].data.big`, 0, "export x: the expression was stopped: it read a string of 100000 bytes, over the limit of 65536 bytes"},
		{bomb, time.Hour, "export x: the expression was stopped: it exceeded its cost limit of 1000000"},
		{bomb, time.Millisecond, "export x: the expression was stopped: it exceeded its time budget of 1ms"},
	} {
		obj := &kclv1.KCLArtifact{Spec: kclv1.KCLArtifactSpec{Exports: []kclv1.Export{{Name: "x", Expression: tc.expr}}}}
		start := time.Now()
		_, err := evalExports(context.Background(), obj, []*unstructured.Unstructured{cm}, nil, tc.budget)
		var se *stepError
		if !errors.As(err, &se) || se.reason != kclv1.ExportFailedReason || se.stalled || err.Error() != tc.want {
			t.Errorf("%.40s: %v; want %q, retried", tc.expr, err, tc.want)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%.40s: stopped after %v", tc.expr, took)
		}
	}
}
