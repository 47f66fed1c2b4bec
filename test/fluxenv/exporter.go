package fluxenv

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ExporterRequestRate is how many requests a second an Exporter plays by default.
const ExporterRequestRate = 20.0

// Exporter plays an application's metrics: it stands in for the demo application in envtest and
// end-to-end tests, where no Pods run, so that a real Prometheus has a real target to scrape.
// It serves /metrics on 127.0.0.1 in the Prometheus text format with the counters
//
//	demo_app_requests_total{code="200",version="<version>"}
//	demo_app_requests_total{code="500",version="<version>"}
//
// which advance by themselves, at RequestRate requests a second, of which ErrorRatio answer 500.
// Nothing runs in the background: the counters are computed from the time elapsed whenever they
// are read (a scrape), changes of rate, ratio or version taking effect from the moment they are
// made. A version, as a new release of the application would, starts its counters from zero and
// the previous version's series disappear (Prometheus marks them stale).
type Exporter struct {
	srv *http.Server
	ln  net.Listener

	mu         sync.Mutex
	now        func() time.Time
	last       time.Time // when the counters were last advanced
	rate       float64   // requests a second
	errorRatio float64   // of the requests, the share answering 500
	version    string
	ok, failed float64 // the counters of version: code 200, code 500
}

// StartExporter serves a new Exporter on a free port of 127.0.0.1: 20 requests a second, no
// errors, version "" (the label is then absent in Prometheus).
func StartExporter() (*Exporter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e := &Exporter{ln: ln, now: time.Now, rate: ExporterRequestRate}
	e.last = e.now()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(exporterCollector{e}); err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	e.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go e.srv.Serve(ln) //nolint:errcheck // ends with Close
	return e, nil
}

// Addr is the exporter's address, 127.0.0.1:<port>: a scrape target.
func (e *Exporter) Addr() string { return e.ln.Addr().String() }

// MetricsURL is http://127.0.0.1:<port>/metrics.
func (e *Exporter) MetricsURL() string { return "http://" + e.Addr() + "/metrics" }

// SetErrorRatio sets the share of requests that answer 500 from now on (clamped to [0, 1]).
func (e *Exporter) SetErrorRatio(r float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advance()
	e.errorRatio = max(0, min(1, r))
}

// SetRequestRate sets the requests a second from now on (negative counts as 0).
func (e *Exporter) SetRequestRate(perSecond float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advance()
	e.rate = max(0, perSecond)
}

// SetVersion labels the series with version from now on: the application was replaced by that
// version, whose counters start from zero. Setting the current version does nothing.
func (e *Exporter) SetVersion(version string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advance()
	if version != e.version {
		e.version, e.ok, e.failed = version, 0, 0
	}
}

// Requests returns the counters as a scrape now would see them: requests answered 200 and 500.
func (e *Exporter) Requests() (ok, failed float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.advance()
	return e.ok, e.failed
}

// Close stops serving.
func (e *Exporter) Close() error { return e.srv.Close() }

// advance adds the requests of the time since the last advance. e.mu is held.
func (e *Exporter) advance() {
	now := e.now()
	if d := now.Sub(e.last).Seconds(); d > 0 {
		n := e.rate * d
		e.failed += n * e.errorRatio
		e.ok += n * (1 - e.errorRatio)
	}
	e.last = now
}

var exporterRequestsDesc = prometheus.NewDesc("demo_app_requests_total",
	"Requests answered by the demo application (played by fluxenv's Exporter), by status code.",
	[]string{"code", "version"}, nil)

// exporterCollector reads the Exporter's counters at each scrape.
type exporterCollector struct{ e *Exporter }

func (c exporterCollector) Describe(ch chan<- *prometheus.Desc) { ch <- exporterRequestsDesc }

func (c exporterCollector) Collect(ch chan<- prometheus.Metric) {
	c.e.mu.Lock()
	c.e.advance()
	ok, failed, version := c.e.ok, c.e.failed, c.e.version
	c.e.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(exporterRequestsDesc, prometheus.CounterValue, ok, "200", version)
	ch <- prometheus.MustNewConstMetric(exporterRequestsDesc, prometheus.CounterValue, failed, "500", version)
}
