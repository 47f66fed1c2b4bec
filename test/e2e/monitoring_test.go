package e2e

import (
	"bytes"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/monitoring"
)

// checkMonitoringPack holds the operations pack (config/monitoring) to the running controller,
// once it has rendered the KCLArtifact ns/name and rolled it back to revision: every metric the alerting rules and the dashboard
// query is one the controller exports (kube-state-metrics' names apart), and kube-state-metrics'
// paths give obj's gotk_resource_info the labels the rules select on.
func checkMonitoringPack(t *testing.T, ns, name, revision string) {
	t.Helper()
	url := kclController().MetricsURL()
	code, body, err := httpGet(t, url)
	if err != nil || code != 200 {
		t.Fatalf("GET %s: %d %v", url, code, err)
	}
	exposed, err := monitoring.ExposedNames(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	queries, err := monitoring.Queries(suite.repo)
	if err != nil {
		t.Fatal(err)
	}
	if unknown := monitoring.UnknownNames(queries, exposed); len(unknown) > 0 {
		t.Errorf("the operations pack queries metrics the controller does not export (exempt: %v):\n%s",
			monitoring.KubeStateMetricsNames, strings.Join(unknown, "\n"))
	}
	t.Logf("operations pack: %d queries checked against %d exported metric names", len(queries), len(exposed))

	obj := &kclv1.KCLArtifact{}
	if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"name": name, "exported_namespace": ns, "ready": "False", "reason": kclv1.RolledBackReason,
		"remediation": kclv1.RolledBackReason, "revision": revision, "source_name": obj.Spec.SourceRef.Name,
	}
	if got := ksmLabels(t, obj); !maps.Equal(got, want) {
		t.Errorf("gotk_resource_info labels of the rolled-back KCLArtifact: %v, want %v", got, want)
	}
}

// ksmLabels resolves the kube-state-metrics config's label paths in obj as the API server
// serves it (JSON, omitted fields absent).
func ksmLabels(t *testing.T, obj *kclv1.KCLArtifact) map[string]string {
	t.Helper()
	v, err := monitoring.LoadKSMValues(suite.repo)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var u map[string]any
	if err := json.Unmarshal(b, &u); err != nil {
		t.Fatal(err)
	}
	r := v.KubeStateMetrics.CustomResourceState.Config.Spec.Resources[0]
	return monitoring.InfoLabels(r, r.Metrics[0], u)
}
