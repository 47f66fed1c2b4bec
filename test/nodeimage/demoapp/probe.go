package main

// The network probe of the node suite's NetworkPolicy test:
//
//	demo-app probe [-port 8080]
//	    serves GET /probe?url=URL: the Pod itself GETs URL (3s timeout) and answers 200 with
//	    {"url":URL,"status":<HTTP status, 0 when none>,"error":"<why no answer>"}, so a test
//	    outside the Pod learns what the Pod's own network identity may open; GET /healthz 200.

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"
)

// probeResult is one attempt of the Pod to open a URL.
type probeResult struct {
	URL    string `json:"url"`
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
}

func probe(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	port := fs.String("port", "8080", "port to listen on")
	_ = fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// no keep-alive: each probe opens its own connection, so it meets the firewall afresh
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /probe", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(fetch(r.Context(), hc, r.URL.Query().Get("url")))
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	return serve(ctx, net.JoinHostPort("", *port), mux, time.Second)
}

func fetch(ctx context.Context, hc *http.Client, url string) probeResult {
	res := probeResult{URL: url}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	resp, err := hc.Do(req)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	res.Status = resp.StatusCode
	return res
}
