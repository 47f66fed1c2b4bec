package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// newServer serves the application with ERROR_RATIO=ratio.
func newServer(t *testing.T, ratio string) *httptest.Server {
	t.Helper()
	plan, err := parseErrorRatio(ratio)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(handler(answer{Message: "hello", Pod: "demo-1"}, plan, &metrics{}))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// wantMetrics checks the counters of GET /metrics.
func wantMetrics(t *testing.T, srv *httptest.Server, ok, failed string) {
	t.Helper()
	code, body := get(t, srv.URL+"/metrics")
	want := "# HELP demo_app_requests_total Answers of GET / by HTTP status code.\n" +
		"# TYPE demo_app_requests_total counter\n" +
		"demo_app_requests_total{code=\"200\"} " + ok + "\n" +
		"demo_app_requests_total{code=\"500\"} " + failed + "\n"
	if code != 200 || body != want {
		t.Errorf("GET /metrics: %d\n%s\nwant\n%s", code, body, want)
	}
}

// The counter counts the answers of GET / only, from 0.
func TestMetricsCountAnswers(t *testing.T) {
	srv := newServer(t, "")
	wantMetrics(t, srv, "0", "0")
	for range 3 {
		if code, body := get(t, srv.URL+"/"); code != 200 || !strings.Contains(body, `"message":"hello"`) {
			t.Fatalf("GET /: %d %q", code, body)
		}
	}
	if code, body := get(t, srv.URL+"/?format=text"); code != 200 || body != "hello (pod demo-1)\n" {
		t.Fatalf("GET /?format=text: %d %q", code, body)
	}
	// neither the health check, the metrics nor unknown paths count
	get(t, srv.URL+"/healthz")
	get(t, srv.URL+"/metrics")
	if code, _ := get(t, srv.URL+"/nope"); code != 404 {
		t.Errorf("GET /nope: %d, want 404", code)
	}
	wantMetrics(t, srv, "4", "0")
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/plain; version=0.0.4; charset=utf-8" {
		t.Errorf("GET /metrics: Content-Type %q", ct)
	}
}

// ERROR_RATIO=0.5: every second answer of GET / is a deliberate 500, the counter shows it, and the
// health check stays 200.
func TestErrorRatio(t *testing.T) {
	srv := newServer(t, "0.5")
	var codes []int
	for range 10 {
		code, body := get(t, srv.URL+"/")
		codes = append(codes, code)
		if code == 500 {
			var e map[string]string
			if err := json.Unmarshal([]byte(body), &e); err != nil || !strings.HasPrefix(e["error"], "deliberate error") || !strings.Contains(e["error"], "ERROR_RATIO=0.5") {
				t.Errorf("500 body %q (%v)", body, err)
			}
		}
		if code, _ := get(t, srv.URL+"/healthz"); code != 200 {
			t.Errorf("GET /healthz: %d", code)
		}
	}
	if want := []int{200, 500, 200, 500, 200, 500, 200, 500, 200, 500}; !equal(codes, want) {
		t.Errorf("codes %v, want %v", codes, want)
	}
	wantMetrics(t, srv, "5", "5")
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Of the first N requests, exactly floor(N*r) fail, whatever r.
func TestErrorPlanCounts(t *testing.T) {
	for _, c := range []struct {
		ratio string
		n     int
		fail  int
	}{
		{"0", 100, 0}, {"1", 100, 100}, {"0.1", 100, 10}, {"0.25", 10, 2}, {"0.3", 10, 3},
		{"0.3", 1000, 300}, {"1e-6", 2_000_000, 2}, {"0.999999", 1_000_000, 999_999},
	} {
		plan, err := parseErrorRatio(c.ratio)
		if err != nil {
			t.Fatal(err)
		}
		fail := 0
		for range c.n {
			if _, f := plan.next(); f {
				fail++
			}
		}
		if fail != c.fail {
			t.Errorf("ERROR_RATIO=%s: %d of %d failed, want %d", c.ratio, fail, c.n, c.fail)
		}
	}
}

// An ERROR_RATIO that is not a number from 0 to 1 is refused, and says why.
func TestErrorRatioInvalid(t *testing.T) {
	for _, s := range []string{"x", "-0.1", "1.5", "NaN", "Inf", "50%", " 0.5"} {
		if _, err := parseErrorRatio(s); err == nil || !strings.Contains(err.Error(), "want a number from 0 to 1") {
			t.Errorf("ERROR_RATIO=%q: %v, want an error", s, err)
		}
	}
	for _, s := range []string{"", "0", "0.0", "1", "1.0", "0.5", ".25"} {
		if _, err := parseErrorRatio(s); err != nil {
			t.Errorf("ERROR_RATIO=%q: %v", s, err)
		}
	}
}
