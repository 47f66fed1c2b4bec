package fluxenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// errorRatioQuery is the share of the demo application's requests that answered 500 over the
// last 5s (the scrape interval is 1s).
const errorRatioQuery = `sum(rate(demo_app_requests_total{code="500"}[5s])) / sum(rate(demo_app_requests_total[5s]))`

// TestPrometheusScrapesExporter: a real Prometheus (bin/prometheus) scrapes the Exporter every
// second; the error ratio it computes follows SetErrorRatio; stopped, it refuses connections;
// started again, it answers on the same address with the data it had. Without bin/prometheus
// (make prometheus) it skips, except in CI (CI=true), where it fails.
func TestPrometheusScrapesExporter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prom, exp := StartMetrics(t)
	if !strings.HasPrefix(prom.URL(), "http://127.0.0.1:") {
		t.Fatalf("URL %s is not on 127.0.0.1", prom.URL())
	}

	// the ratio, once Prometheus has scraped enough for a rate
	waitRatio := func(what string, ok func(float64) bool) float64 {
		t.Helper()
		var got float64
		if err := WaitFor(ctx, time.Minute, what, func(ctx context.Context) (bool, string, error) {
			v, err := querySingle(ctx, prom, errorRatioQuery)
			if err != nil {
				return false, "", err
			}
			got = v
			return ok(v), fmt.Sprintf("error ratio %v", v), nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	start := time.Now()
	v := waitRatio("an error ratio of 0", func(v float64) bool { return math.Abs(v) < 0.01 })
	t.Logf("error ratio %v after %s", v, time.Since(start).Round(time.Millisecond))

	exp.SetErrorRatio(0.5)
	start = time.Now()
	v = waitRatio("an error ratio above 0.3 after SetErrorRatio(0.5)", func(v float64) bool { return v > 0.3 })
	t.Logf("error ratio %v %s after SetErrorRatio(0.5)", v, time.Since(start).Round(time.Millisecond))
	// the same rise read back from Prometheus' data through a range query: the ratio is 0 before
	// SetErrorRatio(0.5) and first passes 0.3 after it
	// (asked again until it holds: the range's points are a second apart from its start, and the
	// last one may fall just before the instant the query above saw the rise)
	var series []PromSeries
	var rose time.Time
	if err := WaitFor(ctx, 10*time.Second, "a range query showing the rise", func(ctx context.Context) (bool, string, error) {
		var err error
		if series, err = prom.QueryRange(ctx, errorRatioQuery, start.Add(-10*time.Second), time.Now(), time.Second); err != nil {
			return false, "", err
		}
		if len(series) != 1 || len(series[0].Points) < 2 {
			return false, fmt.Sprintf("%+v, want one series of several points", series), nil
		}
		for _, pt := range series[0].Points {
			if pt.Value > 0.3 {
				rose = pt.At
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%+v", series[0].Points), nil
	}); err != nil {
		t.Fatal(err)
	}
	if first := series[0].Points[0]; first.Value > 0.01 || rose.Before(start.Truncate(time.Second)) {
		t.Fatalf("range query from %s: %+v, want 0 first and a rise above 0.3 after %s", start.Add(-10*time.Second).Format(time.TimeOnly), series[0].Points, start.Format(time.TimeOnly))
	}
	t.Logf("range query: the ratio first passed 0.3 at %s, %s after SetErrorRatio(0.5)", rose.Format(time.TimeOnly), rose.Sub(start).Round(time.Millisecond))

	// how many scrapes Prometheus holds, to tell that a restart keeps them
	const scrapes = `count_over_time(up{job="demo-app"}[1h])`
	before, err := querySingle(ctx, prom, scrapes)
	if err != nil {
		t.Fatal(err)
	}

	addr := prom.Addr
	if err := prom.Stop(); err != nil {
		t.Fatal(err)
	}
	if prom.Process() != nil {
		t.Error("Process() is not nil after Stop")
	}
	_, err = prom.Query(ctx, errorRatioQuery)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("query of a stopped Prometheus: %v, want connection refused", err)
	}
	t.Logf("stopped: the query fails with %v", err)

	start = time.Now()
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	if prom.Addr != addr {
		t.Fatalf("started again at %s, was %s", prom.Addr, addr)
	}
	if err := prom.Start(); err == nil {
		t.Error("Start of a running Prometheus succeeded")
	}
	v = waitRatio("an answer after the restart", func(v float64) bool { return v > 0.3 })
	t.Logf("started again: error ratio %v %s after Start", v, time.Since(start).Round(time.Millisecond))
	// the scrapes before the stop are still there (the TSDB was kept), and it scrapes again
	after, err := querySingle(ctx, prom, scrapes)
	if err != nil {
		t.Fatal(err)
	}
	if after < before {
		t.Fatalf("%s: %v before the restart, %v after; the data was not kept", scrapes, before, after)
	}
	if err := WaitFor(ctx, time.Minute, "a scrape after the restart", func(ctx context.Context) (bool, string, error) {
		n, err := querySingle(ctx, prom, scrapes)
		after = n
		return err == nil && n > before, fmt.Sprintf("%s = %v", scrapes, n), err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %v before the restart, %v after", scrapes, before, after)
}

// TestEnvStopsPrometheus: a Prometheus of Env.StartPrometheus is among the Env's processes,
// named prometheus-1, with its log in the Env's log directory, and Env.Stop stops it.
func TestEnvStopsPrometheus(t *testing.T) {
	bin := RequirePrometheus(t)
	// the parts of an Env that StartPrometheus and Stop use; no control plane
	dir := t.TempDir()
	e := &Env{WorkDir: dir, LogDir: filepath.Join(dir, "logs"), opts: Options{Logf: t.Logf}.withDefaults()}
	if err := os.MkdirAll(e.LogDir, 0o755); err != nil {
		t.Fatal(err)
	}
	prom, err := e.StartPrometheus(PrometheusOptions{Binary: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prom.Close() })
	if want := filepath.Join(e.LogDir, "prometheus-1.log"); prom.LogPath != want {
		t.Errorf("log %s, want %s", prom.LogPath, want)
	}
	var listed []PIDInfo
	for _, p := range e.Processes() {
		if p.Name == "prometheus-1" && p.PID == prom.Process().PID() {
			listed = append(listed, p)
		}
	}
	if len(listed) != 1 || !listed[0].Alive() {
		t.Fatalf("Processes() %v: want the running prometheus-1 (pid %d)", e.Processes(), prom.Process().PID())
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if listed[0].Alive() {
		t.Errorf("prometheus-1 (pid %d) still running after Env.Stop", listed[0].PID)
	}
	if prom.Process() != nil {
		t.Error("Process() is not nil after Env.Stop")
	}
}

// querySingle is the value of a query whose result is one sample; no sample yet (nothing
// scraped) is an error, as is NaN (no requests in the window).
func querySingle(ctx context.Context, p *Prometheus, expr string) (float64, error) {
	samples, err := p.Query(ctx, expr)
	if err != nil {
		return 0, err
	}
	if len(samples) != 1 {
		return 0, fmt.Errorf("%d samples, want 1: %v", len(samples), samples)
	}
	if math.IsNaN(samples[0].Value) {
		return 0, errors.New("NaN")
	}
	return samples[0].Value, nil
}

// TestExporter: the counters advance with the time elapsed at the request rate, split by the
// error ratio; a new version starts from zero; /metrics serves them in the text format.
func TestExporter(t *testing.T) {
	exp, err := StartExporter()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exp.Close() })
	clock := time.Unix(1_000_000, 0)
	exp.mu.Lock()
	exp.now = func() time.Time { return clock }
	exp.last = clock
	exp.mu.Unlock()

	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	clock = clock.Add(10 * time.Second)
	ok, failed := exp.Requests()
	near("200s after 10s", ok, 10*ExporterRequestRate)
	near("500s after 10s", failed, 0)

	exp.SetErrorRatio(0.25)
	clock = clock.Add(4 * time.Second)
	ok, failed = exp.Requests()
	near("200s after 4s more at 25% errors", ok, 10*ExporterRequestRate+3*ExporterRequestRate)
	near("500s after 4s more at 25% errors", failed, ExporterRequestRate)

	exp.SetVersion("v2")
	clock = clock.Add(2 * time.Second)
	ok, failed = exp.Requests()
	near("200s of v2 after 2s", ok, 1.5*ExporterRequestRate)
	near("500s of v2 after 2s", failed, 0.5*ExporterRequestRate)

	resp, err := http.Get(exp.MetricsURL())
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", exp.MetricsURL(), resp.Status, err)
	}
	for _, want := range []string{
		"# TYPE demo_app_requests_total counter",
		`demo_app_requests_total{code="200",version="v2"} 30`,
		`demo_app_requests_total{code="500",version="v2"} 10`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(string(body), `version=""`) {
		t.Errorf("/metrics still serves the first version's series:\n%s", body)
	}
}
