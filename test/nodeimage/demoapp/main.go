// Command demoapp is the workload the node tests and the demo deploy from a KCL program: an HTTP
// server that answers with its configuration (the MESSAGE environment variable, set by the
// rendered Deployment), so a test can see that a change to the KCL program reached the pod.
//
//	GET /         {"message":"...","schema":"...","pod":"..."} (schema: $SCHEMA, what a pre Job
//	              migrated to; pod: $POD_NAME, from the downward API); or, for the share of
//	              requests ERROR_RATIO asks for, 500 {"error":"deliberate error ..."}
//	GET /?format=text, or Accept: text/plain    the same as one line of text
//	GET /healthz  200 ok (also while GET / answers errors: the release is healthy, yet fails)
//	GET /metrics  the Prometheus text format (metrics.go): demo_app_requests_total{code="200"|"500"},
//	              the answers of GET / by HTTP status code
//
// ERROR_RATIO (a number from 0 to 1, default 0; anything else stops the server at start) makes a
// release answer errors, deterministically: of the first N answers of GET /, floor(N*ERROR_RATIO)
// are 500, evenly spread (0.5: every second, 0.25: every fourth, 1: all; see errorPlan).
//
// It writes nothing to disk (the pod runs it with a read-only root file system, as non-root) and
// stops gracefully on SIGTERM: requests in flight are answered before it exits. Its other modes
// (the first argument): migrate and check (jobs.go), probe (probe.go). test/nodeimage builds it
// (BuildDemoApp) into the image ghcr.io/kcl-flux/demo-app:v1 that `make image` writes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// answer is what GET / returns; fixed at start, as the pod's environment is.
type answer struct {
	Message string `json:"message"`
	Schema  string `json:"schema,omitempty"`
	Pod     string `json:"pod,omitempty"`
}

func main() {
	log.SetFlags(0)
	modes := map[string]func([]string) error{"migrate": migrate, "check": check, "probe": probe}
	if len(os.Args) > 1 && modes[os.Args[1]] != nil {
		if err := modes[os.Args[1]](os.Args[2:]); err != nil {
			log.Fatalf("demoapp %s: %v", os.Args[1], err)
		}
		return
	}
	port := flag.String("port", envOr("PORT", "8080"), "port to listen on (default: $PORT or 8080)")
	grace := flag.Duration("shutdown-timeout", 10*time.Second, "how long in-flight requests may take after SIGTERM")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	plan, err := parseErrorRatio(os.Getenv("ERROR_RATIO"))
	if err != nil {
		log.Fatalf("demoapp: %v", err)
	}
	a := answer{Message: os.Getenv("MESSAGE"), Schema: os.Getenv("SCHEMA"), Pod: os.Getenv("POD_NAME")}
	if err := serve(ctx, net.JoinHostPort("", *port), handler(a, plan, &metrics{}), *grace); err != nil {
		log.Fatalf("demoapp: %v", err)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// handler serves the application: GET / answers as plan says and is counted in m.
func handler(a answer, plan *errorPlan, m *metrics) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		if n, fail := plan.next(); fail {
			m.count(http.StatusInternalServerError)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_ = json.NewEncoder(w).Encode(map[string]string{
				"error": fmt.Sprintf("deliberate error: request %d of this pod, ERROR_RATIO=%s", n, plan),
			})
			return
		}
		m.count(http.StatusOK)
		if r.URL.Query().Get("format") == "text" || strings.HasPrefix(r.Header.Get("Accept"), "text/plain") {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprintln(w, a.text())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /metrics", m.serveHTTP)
	return mux
}

func (a answer) text() string {
	if a.Pod == "" {
		return a.Message
	}
	return a.Message + " (pod " + a.Pod + ")"
}

// serve listens until ctx ends, then shuts down: the listener closes at once (the endpoint is
// already being removed from the Service), open requests get up to grace to finish.
func serve(ctx context.Context, addr string, h http.Handler, grace time.Duration) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("demoapp: listening on %s", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Printf("demoapp: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
