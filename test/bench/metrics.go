package main

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics of the controller the harness reads. A metric the controller does not expose (yet) is
// 0 and shown as "n/a".
const (
	mRESTRequests   = "rest_client_requests_total"
	mReconciles     = "controller_runtime_reconcile_total"
	mActiveWorkers  = "controller_runtime_active_workers"
	mQueueDepth     = "workqueue_depth"
	mFairQueueDepth = "kcl_artifact_controller_queue_depth"
	mRenders        = "kcl_artifact_controller_renders_total"
	mRenderDuration = "kcl_artifact_controller_render_duration_seconds"
	mWorkerStarts   = "kcl_artifact_controller_worker_starts_total"
	mWorkerKills    = "kcl_artifact_controller_worker_kills_total"
	mColdStarts     = "kcl_artifact_controller_sandbox_cold_starts_total"
	mDepCache       = "kcl_artifact_controller_dependency_cache_total"
	mSourceCache    = "kcl_artifact_controller_source_cache_total"
	mOutputBytes    = "kcl_artifact_controller_render_output_bytes_total"
)

// series is one sample: its labels and value. A histogram gives <name>_count and <name>_sum.
type series struct {
	labels map[string]string
	value  float64
}

// scrape is one reading of a /metrics endpoint, by metric name.
type scrape map[string][]series

var metricsClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}

func scrapeMetrics(ctx context.Context, url string) (scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := metricsClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", url, err)
	}
	out := scrape{}
	for name, mf := range fams {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			add := func(n string, v float64) { out[n] = append(out[n], series{labels: labels, value: v}) }
			switch {
			case m.Counter != nil:
				add(name, m.GetCounter().GetValue())
			case m.Gauge != nil:
				add(name, m.GetGauge().GetValue())
			case m.Untyped != nil:
				add(name, m.GetUntyped().GetValue())
			case m.Histogram != nil:
				add(name+"_count", float64(m.GetHistogram().GetSampleCount()))
				add(name+"_sum", m.GetHistogram().GetSampleSum())
			case m.Summary != nil:
				add(name+"_count", float64(m.GetSummary().GetSampleCount()))
				add(name+"_sum", m.GetSummary().GetSampleSum())
			}
		}
	}
	return out, nil
}

// sum adds the series of name whose labels include match (label → value). ok is false when the
// metric is missing altogether.
func (s scrape) sum(name string, match map[string]string) (v float64, ok bool) {
	ss, ok := s[name]
	if !ok {
		return 0, false
	}
	for _, x := range ss {
		if matches(x.labels, match) {
			v += x.value
		}
	}
	return v, true
}

func matches(labels, match map[string]string) bool {
	for k, want := range match {
		if labels[k] != want {
			return false
		}
	}
	return true
}

// byLabel sums the series of name by the value of one label.
func (s scrape) byLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, x := range s[name] {
		out[x.labels[label]] += x.value
	}
	return out
}

// delta is the change of a metric between two scrapes; ok is false when the later scrape lacks it.
func delta(a, b scrape, name string, match map[string]string) (float64, bool) {
	vb, ok := b.sum(name, match)
	if !ok {
		return 0, false
	}
	va, _ := a.sum(name, match)
	return vb - va, true
}

// deltaByLabel formats the change of a labelled counter as "label=Δ …", or "n/a".
func deltaByLabel(a, b scrape, name, label string) string {
	if _, ok := b[name]; !ok {
		return "n/a"
	}
	before, after := a.byLabel(name, label), b.byLabel(name, label)
	var parts []string
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			parts = append(parts, fmt.Sprintf("%s=%.0f", k, d))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// idle reports whether a controller-runtime controller has nothing queued and nothing running.
// A missing metric counts as idle.
func (s scrape) idle(controller string) bool {
	for _, x := range s[mQueueDepth] {
		if (x.labels["name"] == controller || x.labels["controller"] == controller) && x.value > 0 {
			return false
		}
	}
	// the controller's own fair queue has no workqueue_depth
	if d, _ := s.sum(mFairQueueDepth, nil); d > 0 {
		return false
	}
	v, _ := s.sum(mActiveWorkers, map[string]string{"controller": controller})
	return v == 0
}
