package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
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
		_, err := evalExports(context.Background(), obj, []*unstructured.Unstructured{cm}, tc.budget)
		var se *kreconcile.Error
		if !errors.As(err, &se) || se.Reason != kclv1.ExportFailedReason || se.Stalled || err.Error() != tc.want {
			t.Errorf("%.40s: %v; want %q, retried", tc.expr, err, tc.want)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("%.40s: stopped after %v", tc.expr, took)
		}
	}
}

// An export expression sees a rendered Secret without its data and stringData, whoever rendered
// it (issue 54): the X1 case, a rendered Secret's base64 exported, and anything CEL derives from
// it (its size, a boolean oracle) have nothing to read. Its name and other fields stay.
func TestExportsNeverReadARenderedSecretsData(t *testing.T) {
	secret := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "db"}, "type": "Opaque",
		"data": map[string]any{"password": "czNjcjN0"}, "stringData": map[string]any{"user": "admin"}}}
	// not a core Secret: an ordinary object
	other := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Secret",
		"metadata": map[string]any{"name": "crd"}, "data": map[string]any{"x": "1"}}}
	objs := []*unstructured.Unstructured{secret, other}
	s0 := `objects.filter(o, o.metadata.name == "db")[0]`
	for expr, want := range map[string]string{
		s0 + `.metadata.name`: "db",
		s0 + `.type`:          "Opaque",
		`string(has(` + s0 + `.data)) + string(has(` + s0 + `.stringData))`: "falsefalse",
		`objects.filter(o, o.metadata.name == "crd")[0].data.x`:             "1",
	} {
		obj := &kclv1.KCLArtifact{Spec: kclv1.KCLArtifactSpec{Exports: []kclv1.Export{{Name: "x", Expression: expr}}}}
		got, err := evalExports(context.Background(), obj, objs, 0)
		if err != nil || len(got) != 1 || got[0].Value != want {
			t.Errorf("%s: %v, %v; want %q", expr, got, err, want)
		}
	}
	for _, expr := range []string{s0 + `.data.password`, `size(` + s0 + `.data.password)`,
		s0 + `.data.password.startsWith("c")`, s0 + `.stringData.user`} {
		obj := &kclv1.KCLArtifact{Spec: kclv1.KCLArtifactSpec{Exports: []kclv1.Export{{Name: "x", Expression: expr}}}}
		if got, err := evalExports(context.Background(), obj, objs, 0); err == nil || !strings.Contains(err.Error(), "no such key") {
			t.Errorf("%s: %v, %v; want no such key", expr, got, err)
		}
	}
	if _, ok := secret.Object["data"]; !ok {
		t.Error("the rendered object itself lost its data")
	}
}

// A KCLArtifact that reads a Secret exports nothing, whatever the export reads (issue 54): the
// refusal is stalled and names the Secrets; one without exports, or reading no Secret, is not
// refused.
func TestExportsOfASecretReaderAreRefused(t *testing.T) {
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "conf"}}}
	exports := []kclv1.Export{{Name: "name", Expression: `objects[0].metadata.name`}}
	reads := []kclv1.ArgumentsReference{{Kind: "ConfigMap", Name: "conf"}, {Kind: "Secret", Name: "creds", Optional: true},
		{Kind: "Secret", APIVersion: "v1", Name: "tls"}}
	obj := &kclv1.KCLArtifact{Spec: kclv1.KCLArtifactSpec{Exports: exports, ArgumentsFrom: reads}}
	_, err := evalExports(context.Background(), obj, []*unstructured.Unstructured{cm}, 0)
	var se *kreconcile.Error
	want := "exports are refused: this KCLArtifact reads Secret inputs (argumentsFrom Secret/creds, Secret/tls), and a value " +
		"rendered from them could reach every reader of its status; export from a KCLArtifact that reads no Secret"
	if !errors.As(err, &se) || se.Reason != kclv1.ExportFailedReason || !se.Stalled || err.Error() != want {
		t.Errorf("%v; want stalled %q", err, want)
	}
	if err := exportsRefused(&kclv1.KCLArtifact{Spec: kclv1.KCLArtifactSpec{ArgumentsFrom: reads}}); err != nil {
		t.Errorf("no exports: %v", err)
	}
	obj.Spec.ArgumentsFrom = reads[:1]
	if got, err := evalExports(context.Background(), obj, []*unstructured.Unstructured{cm}, 0); err != nil || got[0].Value != "conf" {
		t.Errorf("no Secret: %v, %v", got, err)
	}
}
