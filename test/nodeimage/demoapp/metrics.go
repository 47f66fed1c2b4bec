package main

import (
	"fmt"
	"net/http"
	"sync/atomic"
)

// metrics are the counters GET /metrics exposes, in the Prometheus text format (version 0.0.4),
// written by hand: a few atomic counters need no client library, and the image stays small.
//
//	demo_app_requests_total{code="200"}  answers of GET / with 200
//	demo_app_requests_total{code="500"}  answers of GET / with 500 (the deliberate errors)
//
// Both series exist from the start, at 0, so that a rate over them is defined before the first
// error. Only the application's own answers of GET / count: not /healthz, /metrics or 404s.
type metrics struct {
	ok, failed atomic.Uint64
}

func (m *metrics) count(code int) {
	switch code {
	case http.StatusOK:
		m.ok.Add(1)
	case http.StatusInternalServerError:
		m.failed.Add(1)
	}
}

func (m *metrics) serveHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	fmt.Fprintf(w, "# HELP demo_app_requests_total Answers of GET / by HTTP status code.\n"+
		"# TYPE demo_app_requests_total counter\n"+
		"demo_app_requests_total{code=\"200\"} %d\n"+
		"demo_app_requests_total{code=\"500\"} %d\n", m.ok.Load(), m.failed.Load())
}
