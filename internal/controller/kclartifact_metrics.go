package controller

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kcl-flux/kcl-artifact-controller/internal/depfetch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
)

const metricPrefix = "kcl_artifact_controller_"

var (
	// sandboxGauge states the render sandbox in force, so that an unconfined controller shows on
	// a dashboard and can be alerted on.
	sandboxGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: metricPrefix + "render_sandbox",
		Help: "1 when KCL renders are confined (Landlock and seccomp), 0 when --kcl-sandbox=off; landlock_abi is the kernel's Landlock ABI.",
	}, []string{"landlock_abi"})
	rendersTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricPrefix + "renders_total",
		Help: "KCL renders by result (success, failure); identical inputs rendered once count once.",
	}, []string{"result"})
	renderDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    metricPrefix + "render_duration_seconds",
		Help:    "Time of a KCL render in a worker, a cold start included when there was one.",
		Buckets: prometheus.ExponentialBuckets(0.002, 2, 15), // 2ms .. 33s
	})
	outputBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: metricPrefix + "render_output_bytes_total",
		Help: "Bytes of rendered YAML.",
	})
	sourceCacheTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricPrefix + "source_cache_total",
		Help: "Source artifacts staged from the unpacked-source cache (hit) or downloaded and unpacked (miss).",
	}, []string{"result"})
)

func init() {
	metrics.Registry.MustRegister(sandboxGauge, rendersTotal, renderDuration, outputBytes, sourceCacheTotal)
}

// RecordSandbox sets the sandbox metric.
func RecordSandbox(confined bool, landlockABI int) {
	v := 0.0
	if confined {
		v = 1
	}
	sandboxGauge.WithLabelValues(strconv.Itoa(landlockABI)).Set(v)
}

func recordRender(start time.Time, output int, err error) {
	renderDuration.Observe(time.Since(start).Seconds())
	if err != nil {
		rendersTotal.WithLabelValues("failure").Inc()
		return
	}
	rendersTotal.WithLabelValues("success").Inc()
	outputBytes.Add(float64(output))
}

// RecordSourceCache counts a source staged from the cache (hit) or downloaded (miss).
func RecordSourceCache(hit bool) {
	result := "miss"
	if hit {
		result = "hit"
	}
	sourceCacheTotal.WithLabelValues(result).Inc()
}

// RegisterEngineMetrics exports the worker pool's and the dependency resolver's counters, read
// when /metrics is scraped.
func RegisterEngineMetrics(pool *kclworker.Pool, deps *depfetch.Fetcher) error {
	return metrics.Registry.Register(&engineCollector{pool: pool, deps: deps})
}

type engineCollector struct {
	pool *kclworker.Pool
	deps *depfetch.Fetcher
}

var (
	workerStartsDesc = prometheus.NewDesc(metricPrefix+"worker_starts_total",
		"KCL worker processes started.", nil, nil)
	coldStartsDesc = prometheus.NewDesc(metricPrefix+"sandbox_cold_starts_total",
		"Renders that found no idle worker of their namespace and waited for one to start (confinement included).", nil, nil)
	workerKillsDesc = prometheus.NewDesc(metricPrefix+"worker_kills_total",
		"KCL workers stopped, by reason: timeout (deadline or cancellation), crashed (died, memory limit), "+
			"protocol_violation, recycled (worn out), evicted (idle).", []string{"reason"}, nil)
	depCacheDesc = prometheus.NewDesc(metricPrefix+"dependency_cache_total",
		"Remote kcl.mod dependencies served from the cache (hit) or downloaded (miss).", []string{"result"}, nil)
	depFetchesDesc = prometheus.NewDesc(metricPrefix+"dependency_fetches_total",
		"Dependency fetch processes, by result: success, or failed (a server's error, a bound, the deadline, the memory limit).",
		[]string{"result"}, nil)
)

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{workerStartsDesc, coldStartsDesc, workerKillsDesc, depCacheDesc, depFetchesDesc} {
		ch <- d
	}
}

func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	s := c.pool.Stats()
	counter(workerStartsDesc, s.Started)
	counter(coldStartsDesc, s.ColdStarts)
	for reason, v := range map[string]int64{"timeout": s.Killed, "crashed": s.Crashed,
		"protocol_violation": s.Violations, "recycled": s.Recycled, "evicted": s.Evicted} {
		counter(workerKillsDesc, v, reason)
	}
	if c.deps != nil {
		d := c.deps.Stats()
		counter(depCacheDesc, d.CacheHits, "hit")
		counter(depCacheDesc, d.Downloads, "miss")
		started, failed := c.deps.FetchStats()
		counter(depFetchesDesc, started-failed, "success")
		counter(depFetchesDesc, failed, "failed")
	}
}
