package monitoring

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

const crdFile = "config/crd/bases/kcl.contrib.fluxcd.io_kclartifacts.yaml"

// TestKubeStateMetricsConfig: the config decodes strictly into kube-state-metrics' config
// shape, makes gotk_resource_info for KCLArtifact's group, version and kind with the labels of
// Flux's monitoring example (and reason, remediation), every path it names exists in the
// CRD's schema, and kube-state-metrics may list and watch the kind.
func TestKubeStateMetricsConfig(t *testing.T) {
	root := fluxenv.MustRepoRoot(t)
	v, err := LoadKSMValues(root)
	if err != nil {
		t.Fatal(err)
	}
	ksm := v.KubeStateMetrics
	if !ksm.CustomResourceState.Enabled {
		t.Error("customResourceState.enabled is not true")
	}
	res := ksm.CustomResourceState.Config.Spec.Resources
	if len(res) != 1 {
		t.Fatalf("%d resources, want 1 (KCLArtifact)", len(res))
	}
	r := res[0]
	gvk := kclv1.GroupVersion.WithKind(kclv1.KCLArtifactKind)
	if r.GroupVersionKind.Group != gvk.Group || r.GroupVersionKind.Version != gvk.Version || r.GroupVersionKind.Kind != gvk.Kind {
		t.Errorf("groupVersionKind %+v, want %s", r.GroupVersionKind, gvk)
	}
	if r.MetricNamePrefix == nil || *r.MetricNamePrefix != "gotk" || len(r.Metrics) != 1 || r.Metrics[0].Name != "resource_info" {
		t.Fatalf("want one metric gotk_resource_info, got prefix %v and metrics %+v", r.MetricNamePrefix, r.Metrics)
	}
	g := r.Metrics[0]
	if !strings.EqualFold(g.Each.Type, "info") || g.Each.Info == nil {
		t.Fatalf("gotk_resource_info: type %q, want an Info metric", g.Each.Type)
	}

	want := map[string][]string{
		"name":               {"metadata", "name"},
		"exported_namespace": {"metadata", "namespace"},
		"ready":              {"status", "conditions", "[type=Ready]", "status"},
		"suspended":          {"spec", "suspend"},
		"revision":           {"status", "artifact", "revision"},
		"source_name":        {"spec", "sourceRef", "name"},
		"reason":             {"status", "conditions", "[type=Ready]", "reason"},
		"remediation":        {"status", "conditions", "[type=Remediated]", "reason"},
		"promotion":          {"status", "conditions", "[type=Promoted]", "reason"},
	}
	got := map[string][]string{}
	for k, p := range g.LabelsFromPath {
		got[k] = p
	}
	for k, p := range g.Each.Info.LabelsFromPath {
		got[k] = append(append([]string{}, g.Each.Info.Path...), p...)
	}
	for k, p := range r.LabelsFromPath {
		got[k] = p
	}
	for k, p := range want {
		if !slices.Equal(got[k], p) {
			t.Errorf("label %s: path %v, want %v", k, got[k], p)
		}
	}
	for k := range got {
		if want[k] == nil {
			t.Errorf("label %s is not one this test knows: add it to want", k)
		}
	}

	schema := crdSchema(t, root, gvk.Version)
	for k, p := range got {
		if err := checkPath(schema, p); err != nil {
			t.Errorf("label %s: path %v: %v", k, p, err)
		}
	}

	plural := crdPlural(t, root)
	found := false
	for _, rule := range ksm.RBAC.ExtraRules {
		if slices.Contains(rule.APIGroups, gvk.Group) && slices.Contains(rule.Resources, plural) &&
			slices.Contains(rule.Verbs, "list") && slices.Contains(rule.Verbs, "watch") {
			found = true
		}
	}
	if !found {
		t.Errorf("rbac.extraRules do not let kube-state-metrics list and watch %s.%s", plural, gvk.Group)
	}
}

// TestCheckPathRejects: the schema walk fails on a field the CRD does not have, so the test
// above can fail.
func TestCheckPathRejects(t *testing.T) {
	schema := crdSchema(t, fluxenv.MustRepoRoot(t), kclv1.GroupVersion.Version)
	for _, p := range [][]string{
		{"status", "lastAppliedRevision"},       // Kustomization's, not KCLArtifact's
		{"spec", "sourceRef", "namespace", "x"}, // below a scalar
		{"status", "conditions", "status"},      // a list without a selector
		{"status", "artifact"},                  // an object, not a value
		{"metadata", "labels"},                  // not a scalar of ObjectMeta
	} {
		if err := checkPath(schema, p); err == nil {
			t.Errorf("path %v: accepted", p)
		}
	}
}

func crdSchema(t *testing.T, root, version string) *apiextensionsv1.JSONSchemaProps {
	t.Helper()
	crd := readCRD(t, root)
	for _, v := range crd.Spec.Versions {
		if v.Name == version && v.Schema != nil {
			return v.Schema.OpenAPIV3Schema
		}
	}
	t.Fatalf("%s: no schema of version %s", crdFile, version)
	return nil
}

func crdPlural(t *testing.T, root string) string {
	t.Helper()
	return readCRD(t, root).Spec.Names.Plural
}

func readCRD(t *testing.T, root string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, crdFile))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		t.Fatal(err)
	}
	return crd
}

// objectMetaScalars are the fields of metadata a label may read (the CRD's schema says only
// "metadata: object").
var objectMetaScalars = []string{"name", "namespace", "uid", "generation", "creationTimestamp", "resourceVersion"}

// checkPath walks a kube-state-metrics path through the CRD's schema: it must end on a scalar.
func checkPath(s *apiextensionsv1.JSONSchemaProps, path []string) error {
	if len(path) == 2 && path[0] == "metadata" {
		if slices.Contains(objectMetaScalars, path[1]) {
			return nil
		}
		return fmt.Errorf("metadata.%s is not a scalar field of ObjectMeta", path[1])
	}
	for i, seg := range path {
		if strings.HasPrefix(seg, "[") {
			key, _, _ := strings.Cut(strings.Trim(seg, "[]"), "=")
			if s.Type != "array" || s.Items == nil || s.Items.Schema == nil {
				return fmt.Errorf("%s selects in %v, which is not a list", seg, path[:i])
			}
			s = s.Items.Schema
			if _, ok := s.Properties[key]; !ok {
				return fmt.Errorf("the elements of %v have no field %s", path[:i], key)
			}
			continue
		}
		if s.Type != "object" {
			return fmt.Errorf("%v is a %s, it has no field %s", path[:i], s.Type, seg)
		}
		p, ok := s.Properties[seg]
		if !ok {
			return fmt.Errorf("%v has no field %s", path[:i], seg)
		}
		s = &p
	}
	switch s.Type {
	case "string", "boolean", "integer", "number":
		return nil
	}
	return fmt.Errorf("%v is a %s, not a value", path, s.Type)
}

// TestResolvePath: paths resolve in an object as kube-state-metrics resolves them.
func TestResolvePath(t *testing.T) {
	obj := map[string]any{
		"metadata": map[string]any{"name": "app", "namespace": "apps"},
		"spec":     map[string]any{"suspend": true, "sourceRef": map[string]any{"name": "repo"}},
		"status": map[string]any{"conditions": []any{
			map[string]any{"type": "Reconciling", "status": "False"},
			map[string]any{"type": "Ready", "status": "True", "reason": "Succeeded"},
		}},
	}
	for _, c := range []struct {
		path []string
		want string
		ok   bool
	}{
		{[]string{"metadata", "name"}, "app", true},
		{[]string{"spec", "suspend"}, "true", true},
		{[]string{"status", "conditions", "[type=Ready]", "reason"}, "Succeeded", true},
		{[]string{"status", "conditions", "[type=Remediated]", "reason"}, "", false},
		{[]string{"status", "artifact", "revision"}, "", false},
		{[]string{"spec", "sourceRef"}, "", false},
	} {
		got, ok := ResolvePath(obj, c.path)
		if got != c.want || ok != c.ok {
			t.Errorf("%v: %q %v, want %q %v", c.path, got, ok, c.want, c.ok)
		}
	}
}

// TestMetricNames: the lexer finds the metrics of expressions like the pack's, and nothing
// else.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (exported_namespace) (rate(a_total{result="failure", x=~"y|z"}[15m])) / sum by (exported_namespace) (rate(a_total[15m])) > 0.5`: {"a_total"},
		`histogram_quantile(0.95, sum by (le) (rate(d_seconds_bucket{ns=~"$namespace"}[$__rate_interval])))`:                                    {"d_seconds_bucket"},
		`count(gotk_resource_info{kind="K", reason="by(x)"}) or vector(0)`:                                                                      {"gotk_resource_info"},
		`max(s) == 0 and on (a) b offset 5m unless c_total * 1e3`:                                                                               {"b", "c_total", "s"},
		`label_values(r_total, exported_namespace)`:                                                                                             {"r_total"},
		`sum(x) without (instance) > bool 1`:                                                                                                    {"x"},
	} {
		if got := MetricNames(expr); !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", expr, got, want)
		}
	}
}

// TestPackQueries: every rule and every dashboard query names at least one metric, so the
// names check in test/e2e covers them all; the dashboard has the sections the pack promises.
func TestPackQueries(t *testing.T) {
	root := fluxenv.MustRepoRoot(t)
	qs, err := Queries(root)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, q := range qs {
		n := MetricNames(q.Expr)
		if len(n) == 0 {
			t.Errorf("%s: no metric found in %q", q.Where, q.Expr)
		}
		for _, m := range n {
			names[m] = true
		}
	}
	for _, m := range []string{
		"kcl_artifact_controller_renders_total", "kcl_artifact_controller_render_duration_seconds_bucket",
		"kcl_artifact_controller_worker_kills_total", "kcl_artifact_controller_worker_starts_total",
		"kcl_artifact_controller_remediations_total", "kcl_artifact_controller_events_dropped_total",
		"kcl_artifact_controller_output_budget_bytes", "controller_runtime_reconcile_total",
		"controller_runtime_reconcile_errors_total", "gotk_resource_info",
	} {
		if !names[m] {
			t.Errorf("the pack queries no %s", m)
		}
	}
	t.Logf("%d queries name %d metrics", len(qs), len(names))
}

// TestDashboard: the dashboard is JSON Grafana provisions: a fixed uid, every panel target on
// the datasource variable.
func TestDashboard(t *testing.T) {
	root := fluxenv.MustRepoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, DashboardFile))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Datasource struct {
					UID string `json:"uid"`
				} `json:"datasource"`
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.UID != "kcl-artifact-controller" {
		t.Errorf("uid %q", d.UID)
	}
	for _, p := range d.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource.UID != "${datasource}" || tg.Expr == "" {
				t.Errorf("panel %q: target on datasource %q with expr %q", p.Title, tg.Datasource.UID, tg.Expr)
			}
		}
	}
}

// TestKustomization: config/monitoring builds into the PodMonitor, the PrometheusRule and the
// dashboard's ConfigMap (labelled for Grafana's sidecar), and the PrometheusRule holds the rule
// file's rules.
func TestKustomization(t *testing.T) {
	root := fluxenv.MustRepoRoot(t)
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(root, Dir))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, r := range res.Resources() {
		kinds[r.GetKind()] = true
		switch r.GetKind() {
		case "ConfigMap":
			if r.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap labels %v: no grafana_dashboard=1", r.GetLabels())
			}
			data := r.GetDataMap()
			if _, ok := data["kcl-artifact-controller.json"]; !ok {
				t.Errorf("dashboard ConfigMap holds %v", slices.Collect(maps.Keys(data)))
			}
		case "PrometheusRule":
			spec, err := r.GetFieldValue("spec")
			if err != nil {
				t.Fatal(err)
			}
			var rules map[string]any
			b, err := os.ReadFile(filepath.Join(root, RulesFile))
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(b, &rules); err != nil {
				t.Fatal(err)
			}
			sj, _ := json.Marshal(spec)
			rj, _ := json.Marshal(rules)
			if !bytes.Equal(sj, rj) {
				t.Errorf("PrometheusRule spec differs from %s: run make monitoring", RulesFile)
			}
		}
	}
	for _, k := range []string{"PodMonitor", "PrometheusRule", "ConfigMap"} {
		if !kinds[k] {
			t.Errorf("config/monitoring builds no %s", k)
		}
	}
}

// TestPrometheusRuleGenerated: prometheus-rule.yaml is what hack/prometheusrule writes.
func TestPrometheusRuleGenerated(t *testing.T) {
	root := fluxenv.MustRepoRoot(t)
	cmd := exec.Command("go", "run", "./hack/prometheusrule", "-check")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestPromtool: promtool checks the rule file and runs its unit tests (input series, expected
// alerts). Without bin/promtool (make promtool) it skips, except in CI (CI=true), where it fails.
func TestPromtool(t *testing.T) {
	root := fluxenv.MustRepoRoot(t)
	promtool := os.Getenv("PROMTOOL")
	if promtool == "" {
		promtool = filepath.Join(root, "bin", "promtool")
	}
	if _, err := os.Stat(promtool); err != nil {
		msg := "promtool not found at " + promtool + " (run `make promtool`, or set PROMTOOL): the alerting rules are not checked"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, args := range [][]string{
		{"check", "rules", RulesFile},
		{"test", "rules", RulesTestFile},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		if err != nil {
			t.Errorf("promtool %s: %v", strings.Join(args, " "), err)
		}
	}
}
