// Package metrics holds the controller's Prometheus metrics (kcl_artifact_controller_*): the
// vectors reconciles observe, the functions that record into them, and the collector of the KCL
// worker pool's and the dependency resolver's counters. They are registered with
// controller-runtime's registry, which the manager serves on /metrics.
package metrics

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kcl-flux/kcl-artifact-controller/internal/depfetch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
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
		Help: "KCL renders by namespace and result (success, failure); identical inputs rendered once count once.",
	}, []string{"namespace", "result"})
	// The waits and durations are per namespace, the tenant boundary, so that an operator sees
	// who is noisy; a namespace is one series whatever its number of objects.
	renderDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    metricPrefix + "render_duration_seconds",
		Help:    "Time of a KCL render, by namespace: the wait for a worker of its share, a cold start and the render.",
		Buckets: prometheus.ExponentialBuckets(0.002, 2, 17), // 2ms .. 131s
	}, []string{"namespace"})
	queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    metricPrefix + "queue_wait_seconds",
		Help:    "Time a KCLArtifact's reconcile request waited in the work queue for a reconcile worker, by namespace.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18), // 1ms .. 131s
	}, []string{"namespace"})
	workerWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    metricPrefix + "render_worker_wait_seconds",
		Help:    "Time a render waited for a KCL worker place within its namespace's share, by namespace.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
	}, []string{"namespace"})
	outputBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: metricPrefix + "render_output_bytes_total",
		Help: "Bytes of rendered YAML.",
	})
	// RemediationsTotal counts remediation actions by namespace and action.
	RemediationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricPrefix + "remediations_total",
		Help: "Remediation actions by namespace and action: retry (a failed phase asked to try again), rollback (a healthy artifact published again), none (nothing healthy to roll back to).",
	}, []string{"namespace", "action"})
	// GateWait observes, by namespace and gate, the time from a stage's render to its gate opening.
	GateWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    metricPrefix + "promotion_gate_wait_seconds",
		Help:    "Time from a stage's render of an artifact to each of its gates opening (upstream, soak, window, approval), by namespace, observed when the artifact is published.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 18), // 1s .. 36h
	}, []string{"namespace", "gate"})
	sourceCacheTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricPrefix + "source_cache_total",
		Help: "Source artifacts staged from the unpacked-source cache (hit) or downloaded and unpacked (miss).",
	}, []string{"result"})
)

// queueLen is the work queue's Len: controller-runtime's workqueue_depth is not kept for a
// queue of one's own.
var queueLen atomic.Value // func() int

// SetQueueLen has queue_depth read the work queue's length from f.
func SetQueueLen(f func() int) { queueLen.Store(f) }

func init() {
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: metricPrefix + "queue_depth",
		Help: "KCLArtifact reconcile requests waiting in the work queue, all namespaces together.",
	}, func() float64 {
		if f, ok := queueLen.Load().(func() int); ok {
			return float64(f())
		}
		return 0
	})
	ctrlmetrics.Registry.MustRegister(sandboxGauge, rendersTotal, renderDuration, queueWait, workerWait, outputBytes, RemediationsTotal, sourceCacheTotal, GateWait, depth)
}

// RecordSandbox sets the sandbox metric.
func RecordSandbox(confined bool, landlockABI int) {
	v := 0.0
	if confined {
		v = 1
	}
	sandboxGauge.WithLabelValues(strconv.Itoa(landlockABI)).Set(v)
}

// RecordRender observes a render of namespace started at start, its output bytes and its result.
func RecordRender(namespace string, start time.Time, output int, err error) {
	renderDuration.WithLabelValues(namespace).Observe(time.Since(start).Seconds())
	if err != nil {
		rendersTotal.WithLabelValues(namespace, "failure").Inc()
		return
	}
	rendersTotal.WithLabelValues(namespace, "success").Inc()
	outputBytes.Add(float64(output))
}

// RecordQueueWait observes a reconcile request's wait in the work queue.
func RecordQueueWait(namespace string, d time.Duration) {
	queueWait.WithLabelValues(namespace).Observe(d.Seconds())
}

// RecordWorkerWait observes a render's wait for a KCL worker (kclworker.Options.Waited).
func RecordWorkerWait(namespace string, d time.Duration) {
	workerWait.WithLabelValues(namespace).Observe(d.Seconds())
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
func RegisterEngineMetrics(pool *kclworker.Pool, deps *depfetch.Fetcher, budget *fairshare.Budget) error {
	return ctrlmetrics.Registry.Register(&engineCollector{pool: pool, deps: deps, budget: budget})
}

type engineCollector struct {
	pool   *kclworker.Pool
	deps   *depfetch.Fetcher
	budget *fairshare.Budget
}

var (
	workerStartsDesc = prometheus.NewDesc(metricPrefix+"worker_starts_total",
		"KCL worker processes started.", nil, nil)
	coldStartsDesc = prometheus.NewDesc(metricPrefix+"sandbox_cold_starts_total",
		"Renders that found no idle worker of their namespace and waited for one to start (confinement included).", nil, nil)
	workerKillsDesc = prometheus.NewDesc(metricPrefix+"worker_kills_total",
		"KCL workers stopped, by reason: timeout (deadline or cancellation), crashed (died, memory limit), "+
			"protocol_violation, recycled (worn out, or keeping more memory than --kcl-idle-memory), "+
			"evicted (idle: --kcl-idle-workers, --kcl-idle-memory or --kcl-worker-idle-timeout).", []string{"reason"}, nil)
	depCacheDesc = prometheus.NewDesc(metricPrefix+"dependency_cache_total",
		"Remote kcl.mod dependencies served from the cache (hit) or downloaded (miss).", []string{"result"}, nil)
	depFetchesDesc = prometheus.NewDesc(metricPrefix+"dependency_fetches_total",
		"Dependency fetch processes, by result: success, or failed (a server's error, a bound, the deadline, the memory limit).",
		[]string{"result"}, nil)
	outputHeldDesc = prometheus.NewDesc(metricPrefix+"output_budget_bytes",
		"Rendered output held by reconciles now (used) and the bound on it (size, --kcl-output-budget).", []string{"state"}, nil)
)

func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{workerStartsDesc, coldStartsDesc, workerKillsDesc, depCacheDesc, depFetchesDesc, outputHeldDesc} {
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
	if c.budget != nil {
		ch <- prometheus.MustNewConstMetric(outputHeldDesc, prometheus.GaugeValue, float64(c.budget.Used()), "used")
		ch <- prometheus.MustNewConstMetric(outputHeldDesc, prometheus.GaugeValue, float64(c.budget.Size()), "size")
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
