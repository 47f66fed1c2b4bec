package monitoring

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// Paths of the pack, relative to the repository root.
const (
	Dir           = "config/monitoring"
	DashboardFile = Dir + "/dashboards/kcl-artifact-controller.json"
	RulesFile     = Dir + "/rules/kcl-artifact-controller.rules.yaml"
	RulesTestFile = Dir + "/rules/kcl-artifact-controller.rules.test.yaml"
	KSMConfigFile = Dir + "/kube-state-metrics-config.yaml"
)

// KubeStateMetricsNames are the metrics the pack queries that kube-state-metrics exports, not
// the controller; the names check skips them, and only them.
var KubeStateMetricsNames = []string{"gotk_resource_info"}

// Query is one PromQL expression of the pack and where it is.
type Query struct {
	Where string // "rule KCLWorkerDeaths", "panel \"Renders by result\"", "variable namespace"
	Expr  string
}

// Queries returns every PromQL expression of the alerting rules and of the dashboard (panel
// targets and query variables).
func Queries(root string) ([]Query, error) {
	rules, err := RuleQueries(root)
	if err != nil {
		return nil, err
	}
	dash, err := DashboardQueries(root)
	if err != nil {
		return nil, err
	}
	return append(rules, dash...), nil
}

// RuleFile is Prometheus' rule file format, as much of it as the checks read.
type RuleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// RuleQueries returns the expression of each rule of the rule file.
func RuleQueries(root string) ([]Query, error) {
	var f RuleFile
	if err := readYAML(filepath.Join(root, RulesFile), &f); err != nil {
		return nil, err
	}
	var out []Query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, Query{Where: "rule " + r.Alert + r.Record, Expr: r.Expr})
		}
	}
	return out, nil
}

// DashboardQueries returns the expression of each panel target (rows' panels included) and of
// each query variable of the dashboard.
func DashboardQueries(root string) ([]Query, error) {
	var d dashboard
	b, err := os.ReadFile(filepath.Join(root, DashboardFile))
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", DashboardFile, err)
	}
	var out []Query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, Query{Where: fmt.Sprintf("panel %q", p.Title), Expr: t.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				return nil, fmt.Errorf("%s: variable %s: query: %w", DashboardFile, v.Name, err)
			}
		}
		out = append(out, Query{Where: "variable " + v.Name, Expr: q.Query})
	}
	return out, nil
}

type dashboard struct {
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// ExposedNames returns the names of the samples of a Prometheus text exposition: a histogram
// family foo gives foo_bucket, foo_sum and foo_count, as a query names them.
func ExposedNames(r io.Reader) (map[string]bool, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for name, f := range fams {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[name], names[name+"_sum"], names[name+"_count"] = true, true, true
		default:
			names[name] = true
		}
	}
	return names, nil
}

// UnknownNames returns, for each query naming a metric that is neither in exposed nor one of
// KubeStateMetricsNames, "<where>: <metric>", sorted.
func UnknownNames(queries []Query, exposed map[string]bool) []string {
	exempt := map[string]bool{}
	for _, n := range KubeStateMetricsNames {
		exempt[n] = true
	}
	var out []string
	for _, q := range queries {
		for _, n := range MetricNames(q.Expr) {
			if !exposed[n] && !exempt[n] {
				out = append(out, q.Where+": "+n)
			}
		}
	}
	sort.Strings(out)
	return out
}

// KSMValues is kube-state-metrics-config.yaml: kube-prometheus-stack's values for its
// kube-state-metrics subchart, as fluxcd/flux2-monitoring-example writes them.
type KSMValues struct {
	KubeStateMetrics struct {
		RBAC struct {
			ExtraRules []rbacv1.PolicyRule `json:"extraRules"`
		} `json:"rbac"`
		CustomResourceState struct {
			Enabled bool      `json:"enabled"`
			Config  KSMConfig `json:"config"`
		} `json:"customResourceState"`
	} `json:"kube-state-metrics"`
}

// KSMConfig mirrors kube-state-metrics v2's customresourcestate.Metrics (pkg/customresourcestate,
// config.go and config_metrics_types.go), whose module the Go proxy here refuses: the fields of
// the info metrics this pack uses, with their YAML names. Decoding is strict, so a misspelt or
// misplaced key fails; a config that uses gauge or stateSet needs them added here.
type KSMConfig struct {
	Spec struct {
		Resources []KSMResource `json:"resources"`
	} `json:"spec"`
}

// KSMResource is customresourcestate.Resource.
type KSMResource struct {
	CommonLabels     map[string]string   `json:"commonLabels,omitempty"`
	LabelsFromPath   map[string][]string `json:"labelsFromPath,omitempty"`
	MetricNamePrefix *string             `json:"metricNamePrefix"`
	GroupVersionKind struct {
		Group   string `json:"group"`
		Version string `json:"version"`
		Kind    string `json:"kind"`
	} `json:"groupVersionKind"`
	ResourcePlural string         `json:"resourcePlural,omitempty"`
	Metrics        []KSMGenerator `json:"metrics"`
}

// KSMGenerator is customresourcestate.Generator.
type KSMGenerator struct {
	CommonLabels   map[string]string   `json:"commonLabels,omitempty"`
	LabelsFromPath map[string][]string `json:"labelsFromPath,omitempty"`
	Name           string              `json:"name"`
	Help           string              `json:"help"`
	Each           struct {
		Type string `json:"type"`
		Info *struct {
			LabelFromKey   string              `json:"labelFromKey,omitempty"`
			LabelsFromPath map[string][]string `json:"labelsFromPath,omitempty"`
			Path           []string            `json:"path,omitempty"`
		} `json:"info"`
	} `json:"each"`
}

// LoadKSMValues decodes kube-state-metrics-config.yaml strictly.
func LoadKSMValues(root string) (*KSMValues, error) {
	b, err := os.ReadFile(filepath.Join(root, KSMConfigFile))
	if err != nil {
		return nil, err
	}
	var v KSMValues
	if err := yaml.UnmarshalStrict(b, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", KSMConfigFile, err)
	}
	return &v, nil
}

// InfoLabels returns the labels an info metric of r takes from an object, as
// kube-state-metrics computes them: the resource's, the metric's and the info's labelsFromPath
// (the info's path is prefixed to its own labels' paths), each resolved in obj; a label whose path
// resolves to nothing is absent.
func InfoLabels(r KSMResource, g KSMGenerator, obj map[string]any) map[string]string {
	paths := map[string][]string{}
	for k, p := range r.LabelsFromPath {
		paths[k] = p
	}
	for k, p := range g.LabelsFromPath {
		paths[k] = p
	}
	if g.Each.Info != nil {
		for k, p := range g.Each.Info.LabelsFromPath {
			paths[k] = append(append([]string{}, g.Each.Info.Path...), p...)
		}
	}
	out := map[string]string{}
	for k, p := range paths {
		if v, ok := ResolvePath(obj, p); ok {
			out[k] = v
		}
	}
	return out
}

// ResolvePath follows a kube-state-metrics path in obj: a name selects a field of an object; a
// "[key=value]" selects the element of a list whose key is value. The leaf is printed as
// kube-state-metrics prints a label value (fmt's %v).
func ResolvePath(obj any, path []string) (string, bool) {
	cur := obj
	for _, seg := range path {
		if strings.HasPrefix(seg, "[") && strings.HasSuffix(seg, "]") {
			key, want, ok := strings.Cut(seg[1:len(seg)-1], "=")
			list, isList := cur.([]any)
			if !ok || !isList {
				return "", false
			}
			cur = nil
			for _, e := range list {
				if m, ok := e.(map[string]any); ok && fmt.Sprint(m[key]) == want {
					cur = m
					break
				}
			}
			if cur == nil {
				return "", false
			}
			continue
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		if cur, ok = m[seg]; !ok {
			return "", false
		}
	}
	switch cur.(type) {
	case map[string]any, []any, nil:
		return "", false
	}
	return fmt.Sprint(cur), true
}

func readYAML(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
