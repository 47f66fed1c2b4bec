package fluxenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// PrometheusOptions configure StartPrometheus. Only Jobs is needed.
type PrometheusOptions struct {
	// Jobs are the scrape jobs of the generated prometheus.yml.
	Jobs []ScrapeJob
	// ScrapeInterval is the global scrape (and rule evaluation) interval; default 1s. The scrape
	// timeout is the interval, capped at 10s. Whole milliseconds.
	ScrapeInterval time.Duration
	// Binary is the prometheus binary; default PrometheusBinary(): $PROMETHEUS, else
	// <repo root>/bin/prometheus (make prometheus).
	Binary string
	// WorkDir holds prometheus.yml and the TSDB (data/), and the log unless LogPath says
	// otherwise. Created if missing; kept by Stop, so that Start carries on with the same data. If
	// empty, a temporary directory is used and removed by Close.
	WorkDir string
	// LogPath receives Prometheus' output (appended to, across restarts); default
	// WorkDir/prometheus.log.
	LogPath string
	// Args are appended to Prometheus' flags.
	Args []string
	// Command, if set, is a prefix Prometheus runs under: it is started as Command[0] with
	// Command[1:], the binary and its flags, e.g. `nsenter --net=/run/netns/x --` to run it in a
	// network namespace. The prefix must exec the binary (not fork it): Stop signals the process
	// started.
	Command []string
	// ListenAddress is the host:port Prometheus listens on; default 127.0.0.1 and a free port.
	// With Command in another network namespace, the caller picks a free port there.
	ListenAddress string
	// HTTPClient reaches Prometheus: the readiness wait and Query. Default a plain client; in
	// another network namespace, one that dials from inside it.
	HTTPClient *http.Client
	// Name names the process (Process.Name, progress messages); default "prometheus".
	Name string
	// StartTimeout bounds each start, until /-/ready answers 200. Default 1 minute.
	StartTimeout time.Duration
	// StopGrace is how long Prometheus may take to exit after SIGTERM before SIGKILL. Default 20s.
	StopGrace time.Duration
	// Logf, if set, receives progress messages.
	Logf func(format string, args ...any)
}

// ScrapeJob is one scrape_config of prometheus.yml: static targets.
type ScrapeJob struct {
	Name    string   // job_name, the job label of the series scraped
	Targets []string // host:port of each target
	// MetricsPath is the path scraped on every target; default /metrics.
	MetricsPath string
}

// Prometheus is a real Prometheus server (bin/prometheus, built by `make prometheus`), a child
// process listening on 127.0.0.1 (or its options' ListenAddress, under their Command) and
// scraping the targets of its options. Stop and Start stop it and start it again on the same
// address and data: a test plays "Prometheus is down, then back".
type Prometheus struct {
	Addr       string // 127.0.0.1:<port> or ListenAddress, the same across restarts
	Binary     string
	WorkDir    string
	DataDir    string // --storage.tsdb.path, kept across restarts
	ConfigPath string // the generated prometheus.yml
	LogPath    string

	opts          PrometheusOptions
	removeWorkDir bool

	mu   sync.Mutex
	proc *Process // the running process, nil when stopped
	all  []*Process
}

// prometheusHint says how to get bin/prometheus.
const prometheusHint = "run `make prometheus` (hack/prometheus.sh) to build it into bin/, or set PROMETHEUS"

// PrometheusBinary returns the prometheus binary: $PROMETHEUS if set, else
// <repo root>/bin/prometheus. The error, when it is missing or not executable, says how to build it.
func PrometheusBinary() (string, error) {
	bin := os.Getenv("PROMETHEUS")
	if bin == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		bin = filepath.Join(root, "bin", "prometheus")
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return bin, fmt.Errorf("prometheus binary %s is missing or not executable: %s", bin, prometheusHint)
	}
	return bin, nil
}

func (o PrometheusOptions) withDefaults() PrometheusOptions {
	if o.ScrapeInterval <= 0 {
		o.ScrapeInterval = time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = time.Minute
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 20 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Name == "" {
		o.Name = "prometheus"
	}
	return o
}

// StartPrometheus writes prometheus.yml, starts Prometheus on a free port of 127.0.0.1 (or on
// ListenAddress) with its TSDB in the work directory, and returns when /-/ready answers 200. On
// failure nothing is left running and the error holds the tail of Prometheus' log.
func StartPrometheus(opts PrometheusOptions) (*Prometheus, error) {
	opts = opts.withDefaults()
	if opts.ScrapeInterval%time.Millisecond != 0 {
		return nil, fmt.Errorf("scrape interval %s is not whole milliseconds", opts.ScrapeInterval)
	}
	p := &Prometheus{Binary: opts.Binary, WorkDir: opts.WorkDir, LogPath: opts.LogPath}
	if p.Binary == "" {
		var err error
		if p.Binary, err = PrometheusBinary(); err != nil {
			return nil, err
		}
	}
	if p.WorkDir == "" {
		dir, err := os.MkdirTemp("", "fluxenv-prometheus-")
		if err != nil {
			return nil, err
		}
		p.WorkDir, p.removeWorkDir = dir, true
	}
	var err error
	if p.WorkDir, err = filepath.Abs(p.WorkDir); err != nil {
		return nil, err
	}
	if p.LogPath == "" {
		p.LogPath = filepath.Join(p.WorkDir, "prometheus.log")
	}
	p.DataDir = filepath.Join(p.WorkDir, "data")
	p.ConfigPath = filepath.Join(p.WorkDir, "prometheus.yml")
	p.opts = opts
	if err := os.MkdirAll(p.DataDir, 0o755); err != nil {
		return nil, err
	}
	config, err := prometheusConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.ConfigPath, config, 0o644); err != nil {
		return nil, err
	}
	if p.Addr = opts.ListenAddress; p.Addr == "" {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		p.Addr = loopback(port)
	}
	if err := p.Start(); err != nil {
		if p.removeWorkDir {
			_ = os.RemoveAll(p.WorkDir)
		}
		return nil, err
	}
	return p, nil
}

// prometheusConfig is prometheus.yml: the global intervals and one static scrape_config a job.
func prometheusConfig(o PrometheusOptions) ([]byte, error) {
	type staticConfig struct {
		Targets []string `json:"targets"`
	}
	type scrapeConfig struct {
		JobName       string         `json:"job_name"`
		MetricsPath   string         `json:"metrics_path,omitempty"`
		StaticConfigs []staticConfig `json:"static_configs"`
	}
	interval := o.ScrapeInterval
	timeout := min(interval, 10*time.Second)
	// Prometheus' durations take units ("1500ms"), not Go's "1.5s"
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }
	cfg := struct {
		Global        map[string]string `json:"global"`
		ScrapeConfigs []scrapeConfig    `json:"scrape_configs"`
	}{Global: map[string]string{
		"scrape_interval":     ms(interval),
		"scrape_timeout":      ms(timeout),
		"evaluation_interval": ms(interval),
	}, ScrapeConfigs: []scrapeConfig{}}
	for _, j := range o.Jobs {
		if j.Name == "" {
			return nil, errors.New("a scrape job without a name")
		}
		cfg.ScrapeConfigs = append(cfg.ScrapeConfigs, scrapeConfig{JobName: j.Name, MetricsPath: j.MetricsPath,
			StaticConfigs: []staticConfig{{Targets: append([]string{}, j.Targets...)}}})
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	return append([]byte("# written by fluxenv (StartPrometheus)\n"), out...), nil
}

// URL is Prometheus' base URL, http://<ListenAddress>, by default http://127.0.0.1:<port>.
func (p *Prometheus) URL() string { return "http://" + p.Addr }

// Start starts Prometheus (again) on its address, configuration and data directory, and returns
// when /-/ready answers 200. Starting a running Prometheus is an error.
func (p *Prometheus) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc != nil {
		return fmt.Errorf("%s at %s is already running (pid %d)", p.opts.Name, p.Addr, p.proc.PID())
	}
	args := append([]string{
		"--config.file=" + p.ConfigPath,
		"--storage.tsdb.path=" + p.DataDir,
		"--web.listen-address=" + p.Addr,
		"--log.level=info",
	}, p.opts.Args...)
	path := p.Binary
	if c := p.opts.Command; len(c) > 0 {
		path, args = c[0], append(append(append([]string{}, c[1:]...), p.Binary), args...)
	}
	started := time.Now()
	proc, err := StartProcess(p.opts.Name, path, args, os.Environ(), p.LogPath)
	if err != nil {
		return err
	}
	proc.HealthURL = p.URL() + "/-/ready"
	proc.HealthClient = p.opts.HTTPClient
	if err := proc.waitHealthy(context.Background(), p.opts.StartTimeout); err != nil {
		_ = proc.Stop(p.opts.StopGrace)
		return err
	}
	p.proc = proc
	p.all = append(p.all, proc)
	p.opts.Logf("fluxenv: %s ready at %s in %s (pid %d, data %s)", p.opts.Name, p.URL(),
		time.Since(started).Round(time.Millisecond), proc.PID(), p.DataDir)
	return nil
}

// Stop stops Prometheus (SIGTERM, then SIGKILL after StopGrace) and waits until it has exited;
// its address then refuses connections. The work directory is kept: Start carries on with it.
// Stopping a stopped Prometheus does nothing.
func (p *Prometheus) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil {
		return nil
	}
	err := p.proc.Stop(p.opts.StopGrace)
	p.proc = nil
	return err
}

// Close stops Prometheus and removes its work directory if StartPrometheus made it.
func (p *Prometheus) Close() error {
	err := p.Stop()
	if err == nil && p.removeWorkDir {
		err = os.RemoveAll(p.WorkDir)
	}
	return err
}

// Process is the running Prometheus process, nil while it is stopped.
func (p *Prometheus) Process() *Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc
}

// processes lists every process Start started, restarts included.
func (p *Prometheus) processes() []*Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Process(nil), p.all...)
}

// PromSample is one sample of an instant vector: its labels and value.
type PromSample struct {
	Labels map[string]string
	Value  float64
}

// Query evaluates expr now through the HTTP API (GET /api/v1/query) and returns the instant
// vector it gives (a scalar result is one sample without labels). A Prometheus that is down
// gives the HTTP client's error (errors.Is(err, syscall.ECONNREFUSED)).
func (p *Prometheus) Query(ctx context.Context, expr string) ([]PromSample, error) {
	resultType, result, err := p.api(ctx, "query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err
	}
	switch resultType {
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(result, &vec); err != nil {
			return nil, fmt.Errorf("query %q: %w", expr, err)
		}
		out := make([]PromSample, 0, len(vec))
		for _, s := range vec {
			v, err := promValue(s.Value[1])
			if err != nil {
				return nil, fmt.Errorf("query %q: %w", expr, err)
			}
			out = append(out, PromSample{Labels: s.Metric, Value: v})
		}
		return out, nil
	case "scalar":
		var s [2]any
		if err := json.Unmarshal(result, &s); err != nil {
			return nil, fmt.Errorf("query %q: %w", expr, err)
		}
		v, err := promValue(s[1])
		if err != nil {
			return nil, fmt.Errorf("query %q: %w", expr, err)
		}
		return []PromSample{{Labels: map[string]string{}, Value: v}}, nil
	default:
		return nil, fmt.Errorf("query %q: result type %q, want vector or scalar", expr, resultType)
	}
}

// PromPoint is one point of a range query's series: its evaluation time and value.
type PromPoint struct {
	At    time.Time
	Value float64
}

// PromSeries is one series of a range query: its labels and points, oldest first.
type PromSeries struct {
	Labels map[string]string
	Points []PromPoint
}

// QueryRange evaluates expr at every step from start to end through the HTTP API
// (GET /api/v1/query_range) and returns the matrix it gives: a series has no point where expr
// gave nothing (before its samples, after they went stale).
func (p *Prometheus) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) ([]PromSeries, error) {
	resultType, result, err := p.api(ctx, "query_range", url.Values{"query": {expr},
		"start": {promTime(start)}, "end": {promTime(end)}, "step": {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)}})
	if err != nil {
		return nil, err
	}
	if resultType != "matrix" {
		return nil, fmt.Errorf("query_range %q: result type %q, want matrix", expr, resultType)
	}
	var matrix []struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	}
	if err := json.Unmarshal(result, &matrix); err != nil {
		return nil, fmt.Errorf("query_range %q: %w", expr, err)
	}
	out := make([]PromSeries, 0, len(matrix))
	for _, m := range matrix {
		s := PromSeries{Labels: m.Metric, Points: make([]PromPoint, 0, len(m.Values))}
		for _, v := range m.Values {
			ts, ok := v[0].(float64)
			if !ok {
				return nil, fmt.Errorf("query_range %q: point time %v is not a number", expr, v[0])
			}
			value, err := promValue(v[1])
			if err != nil {
				return nil, fmt.Errorf("query_range %q: %w", expr, err)
			}
			s.Points = append(s.Points, PromPoint{At: time.UnixMilli(int64(ts * 1000)), Value: value})
		}
		out = append(out, s)
	}
	return out, nil
}

// promTime is t as the HTTP API takes it: Unix seconds with milliseconds.
func promTime(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64)
}

// api calls GET /api/v1/<endpoint> with params and returns the result's type and raw value.
func (p *Prometheus) api(ctx context.Context, endpoint string, params url.Values) (string, json.RawMessage, error) {
	expr := params.Get("query")
	u := p.URL() + "/api/v1/" + endpoint + "?" + params.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", nil, err
	}
	client := p.opts.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", nil, err
	}
	var r struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return "", nil, fmt.Errorf("%s %q: %s: %w (body %.200q)", endpoint, expr, resp.Status, err, body)
	}
	if r.Status != "success" {
		return "", nil, fmt.Errorf("%s %q: %s: %s: %s", endpoint, expr, resp.Status, r.ErrorType, r.Error)
	}
	return r.Data.ResultType, r.Data.Result, nil
}

// promValue parses a sample value of the HTTP API: a string ("1.5", "NaN", "+Inf").
func promValue(v any) (float64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", v)
	}
	return strconv.ParseFloat(s, 64)
}

// StartPrometheus starts a Prometheus as the package's StartPrometheus does, with the Env's
// defaults: its work directory WorkDir/prometheus/<n> (n counts the Env's Prometheuses from 1),
// its log LogDir/prometheus-<n>.log, its process named prometheus-<n>, the Env's StopGrace and
// Logf. Env.Stop stops it; Processes lists it.
func (e *Env) StartPrometheus(opts PrometheusOptions) (*Prometheus, error) {
	e.promMu.Lock()
	e.promStarted++
	n := strconv.Itoa(e.promStarted)
	e.promMu.Unlock()
	if opts.WorkDir == "" {
		opts.WorkDir = filepath.Join(e.WorkDir, "prometheus", n)
	}
	if opts.LogPath == "" && e.LogDir != "" {
		opts.LogPath = filepath.Join(e.LogDir, "prometheus-"+n+".log")
	}
	if opts.Name == "" {
		opts.Name = "prometheus-" + n
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = e.opts.StopGrace
	}
	if opts.Logf == nil {
		opts.Logf = e.opts.Logf
	}
	p, err := StartPrometheus(opts)
	if err != nil {
		return nil, err
	}
	e.promMu.Lock()
	e.prometheuses = append(e.prometheuses, p)
	e.promMu.Unlock()
	return p, nil
}

// prometheusList is the Prometheuses of Env.StartPrometheus.
func (e *Env) prometheusList() []*Prometheus {
	e.promMu.Lock()
	defer e.promMu.Unlock()
	return append([]*Prometheus(nil), e.prometheuses...)
}

// prometheusProcesses lists the processes of the Env's Prometheuses, restarts included.
func (e *Env) prometheusProcesses() []*Process {
	var ps []*Process
	for _, p := range e.prometheusList() {
		ps = append(ps, p.processes()...)
	}
	return ps
}

// RequirePrometheus is the Prometheus binary (PrometheusBinary); without it t is skipped, except
// under CI=true, where it fails.
func RequirePrometheus(t testing.TB) string {
	t.Helper()
	bin, err := PrometheusBinary()
	if err != nil {
		msg := err.Error() + ": the test against a real Prometheus does not run"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// StartMetrics starts an Exporter playing the demo application's metrics and a real Prometheus
// (bin/prometheus) scraping it every second, both stopped at t's end (Prometheus's log tail shown
// when t failed). Without bin/prometheus t is skipped, except under CI=true, where it fails.
func StartMetrics(t testing.TB) (*Prometheus, *Exporter) {
	t.Helper()
	bin := RequirePrometheus(t)
	exp, err := StartExporter()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exp.Close() })
	prom, err := StartPrometheus(PrometheusOptions{
		Binary:  bin,
		Jobs:    []ScrapeJob{{Name: "demo-app", Targets: []string{exp.Addr()}}},
		WorkDir: t.TempDir(),
		Logf:    t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last 40 lines of %s:\n%s", prom.LogPath, Tail(prom.LogPath, 40))
		}
		if err := prom.Close(); err != nil {
			t.Error(err)
		}
	})
	return prom, exp
}
