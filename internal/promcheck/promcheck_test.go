package promcheck_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promcheck"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// errorRatioQuery is the share of the demo application's requests that answered 500 over the
// last 5s (Prometheus scrapes the exporter every second).
const errorRatioQuery = `sum(rate(demo_app_requests_total{code="500"}[5s])) / sum(rate(demo_app_requests_total[5s]))`

// loopback lets a Runner reach the test servers and Prometheus on 127.0.0.1; the default rules
// refuse them (TestGuardRefusesLoopbackByDefault).
var loopback = kclmod.Options{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// promEnv is a real Prometheus (bin/prometheus) scraping an Exporter every second.
type promEnv struct {
	prom *fluxenv.Prometheus
	exp  *fluxenv.Exporter
}

// startProm starts a Prometheus and its Exporter for t (fluxenv.StartMetrics).
func startProm(t *testing.T) promEnv {
	t.Helper()
	prom, exp := fluxenv.StartMetrics(t)
	return promEnv{prom: prom, exp: exp}
}

func newRunner(t *testing.T, o promcheck.Options) *promcheck.Runner {
	t.Helper()
	r, err := promcheck.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func compile(t *testing.T, c promcheck.Check) *promcheck.Compiled {
	t.Helper()
	cc, err := promcheck.Compile(c)
	if err != nil {
		t.Fatalf("Compile(%+v): %v", c, err)
	}
	return cc
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// waitVerdict runs c until it gives want, polling within a minute, and returns that result.
func waitVerdict(t *testing.T, ctx context.Context, r *promcheck.Runner, ns string, c *promcheck.Compiled, want promcheck.Verdict, also func(promcheck.Result) bool) promcheck.Result {
	t.Helper()
	var got promcheck.Result
	if err := fluxenv.WaitFor(ctx, time.Minute, fmt.Sprintf("check %s %s", c.Name(), want), func(ctx context.Context) (bool, string, error) {
		got = r.Run(ctx, ns, c)
		return got.Verdict == want && (also == nil || also(got)), fmt.Sprintf("%+v", got), nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

func mustContain(t *testing.T, what, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("%s: %q lacks %q", what, s, p)
		}
	}
}

// 1. The error ratio of the exporter, through a real Prometheus: 0 passes `value < 0.05`; at
// 0.5 the check fails and Value says the ratio.
func TestErrorRatioPassesThenFails(t *testing.T) {
	ctx := testCtx(t)
	env := startProm(t)
	r := newRunner(t, promcheck.Options{Network: loopback})
	c := compile(t, promcheck.Check{Name: "errors", Address: env.prom.URL(), Query: errorRatioQuery, Condition: "value < 0.05"})

	start := time.Now()
	// a rate needs two scrapes: before that the result has no sample (Inconclusive) or is NaN
	got := waitVerdict(t, ctx, r, "team", c, promcheck.Passed, nil)
	t.Logf("passed after %s: %+v", time.Since(start).Round(time.Millisecond), got)
	if v, err := strconv.ParseFloat(got.Value, 64); err != nil || v >= 0.05 {
		t.Errorf("Value %q: want the ratio, under 0.05", got.Value)
	}

	env.exp.SetErrorRatio(0.5)
	start = time.Now()
	got = waitVerdict(t, ctx, r, "team", c, promcheck.Failed, func(res promcheck.Result) bool {
		v, err := strconv.ParseFloat(res.Value, 64)
		return err == nil && v > 0.3
	})
	t.Logf("failed %s after SetErrorRatio(0.5): %+v", time.Since(start).Round(time.Millisecond), got)
	mustContain(t, "Message", got.Message, "did not hold")
}

// 2. A query that does not parse is Invalid with Prometheus' own parse error.
func TestQueryThatDoesNotParse(t *testing.T) {
	ctx := testCtx(t)
	env := startProm(t)
	r := newRunner(t, promcheck.Options{Network: loopback})
	c := compile(t, promcheck.Check{Name: "bad", Address: env.prom.URL() + "/", Query: `sum(rate(demo_app_requests_total[5s]`, Condition: "value < 0.05"})
	got := r.Run(ctx, "team", c)
	if got.Verdict != promcheck.Invalid {
		t.Fatalf("%+v: want Invalid", got)
	}
	mustContain(t, "Message", got.Message, "Prometheus refused the query", "parse error")
	t.Logf("%+v", got)

	// a range vector is no instant result
	c = compile(t, promcheck.Check{Name: "range", Address: env.prom.URL(), Query: `up[1m]`, Condition: "value < 0.05"})
	if got := r.Run(ctx, "team", c); got.Verdict != promcheck.Invalid || !strings.Contains(got.Message, "range vector") {
		t.Fatalf("a range vector: %+v", got)
	}
}

// 3. Checks refused at Compile: conditions that do not compile, return no bool or cost too much,
// and addresses that are no Prometheus base URL; the messages hold no credentials.
func TestCompileRefuses(t *testing.T) {
	ten := "[0,1,2,3,4,5,6,7,8,9]"
	lit := `"` + strings.Repeat("1", 3000) + `"`
	ok := promcheck.Check{Name: "c", Address: "http://prometheus.monitoring:9090", Query: "up", Condition: "value < 0.05"}
	for _, tc := range []struct {
		change func(*promcheck.Check)
		want   string
	}{
		{func(c *promcheck.Check) { c.Condition = "value + 1" }, "found no matching overload"},
		{func(c *promcheck.Check) { c.Condition = "value + 1.0" }, "the condition returns a double, not a bool"},
		{func(c *promcheck.Check) { c.Condition = `"x"` }, "the condition returns a string, not a bool"},
		{func(c *promcheck.Check) { c.Condition = "value <" }, "the condition does not compile"},
		{func(c *promcheck.Check) { c.Condition = "errors < 1.0" }, "undeclared reference to 'errors'"},
		{func(c *promcheck.Check) { c.Condition = "" }, "the condition is empty"},
		{func(c *promcheck.Check) {
			c.Condition = ten + ".map(a, " + ten + ".map(b, " + ten + ".map(c, " + ten + ".map(d, double(" + lit + ")))))[0][0][0][0] > value"
		}, "the condition's estimated cost is at least"},
		{func(c *promcheck.Check) { c.Condition = strings.Repeat("value < 1.0 && ", 300) + "true" }, "over the limit of 4096 bytes"},
		{func(c *promcheck.Check) { c.Query = " " }, "the query is empty"},
		{func(c *promcheck.Check) { c.Query = strings.Repeat("x", 9000) }, "over the limit of 8192 bytes"},
		{func(c *promcheck.Check) { c.Address = "ftp://prom:21" }, "not an http:// or https:// URL"},
		{func(c *promcheck.Check) { c.Address = "prometheus:9090" }, "not an http:// or https:// URL"},
		{func(c *promcheck.Check) { c.Address = "http://admin:hunter2@prom:9090" }, "user information"},
		{func(c *promcheck.Check) { c.Address = "http://prom:9090/?x=1" }, "has a query or fragment"},
		{func(c *promcheck.Check) { c.Address = "http://prom:9090/#x" }, "has a query or fragment"},
		{func(c *promcheck.Check) {
			c.Auth = &promcheck.Auth{BearerToken: "t", Username: "u", Password: "hunter2"}
		}, "both a token and a username"},
		{func(c *promcheck.Check) { c.Auth = &promcheck.Auth{CA: []byte("not a certificate")} }, "ca.crt holds no PEM certificate"},
	} {
		c := ok
		tc.change(&c)
		_, err := promcheck.Compile(c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Compile(%.80q, %.80q, %.80q) = %v; want %q", c.Address, c.Query, c.Condition, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("the error %q shows the password", err)
		}
	}
	if _, err := promcheck.Compile(ok); err != nil {
		t.Fatal(err)
	}
}

// 4. Prometheus stopped: Inconclusive, connection refused; started again: Passed again.
func TestPrometheusDownThenBack(t *testing.T) {
	ctx := testCtx(t)
	env := startProm(t)
	r := newRunner(t, promcheck.Options{Network: loopback})
	c := compile(t, promcheck.Check{Name: "up", Address: env.prom.URL(), Query: `count(up{job="demo-app"} == 1)`, Condition: "value >= 1.0"})
	waitVerdict(t, ctx, r, "team", c, promcheck.Passed, nil)

	if err := env.prom.Stop(); err != nil {
		t.Fatal(err)
	}
	got := r.Run(ctx, "team", c)
	if got.Verdict != promcheck.Inconclusive || !strings.Contains(got.Message, "connection refused") {
		t.Fatalf("Prometheus stopped: %+v; want Inconclusive, connection refused", got)
	}
	t.Logf("stopped: %+v", got)
	if err := env.prom.Start(); err != nil {
		t.Fatal(err)
	}
	got = waitVerdict(t, ctx, r, "team", c, promcheck.Passed, nil)
	t.Logf("started again: %+v", got)
}

// hostile serves handler on 127.0.0.1: it plays a hostile (or broken) Prometheus.
func hostile(t *testing.T, handler http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv.URL
}

// 5. Hostile servers: a huge answer is cut off at the bound while it is read, one that never
// answers at the timeout, too many series are refused, other answers are Inconclusive without
// their words.
func TestHostileServers(t *testing.T) {
	ctx := testCtx(t)

	// a hostile Prometheus streaming 50 MB of series, counting what it managed to send
	const total = 50 << 20
	var sent atomic.Int64
	huge := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[`)
		chunk := []byte(strings.Repeat(`{"metric":{"a":"b"},"value":[1,"1"]},`, 1000))
		for sent.Load() < total {
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	r := newRunner(t, promcheck.Options{Network: loopback})
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got := r.Run(ctx, "team", compile(t, promcheck.Check{Name: "huge", Address: huge, Query: "up", Condition: "value < 1.0"}))
	runtime.ReadMemStats(&after)
	if got.Verdict != promcheck.Inconclusive || !strings.Contains(got.Message, "over 1 MiB") {
		t.Fatalf("a 50 MB answer: %+v; want Inconclusive, over 1 MiB", got)
	}
	// what the server could send is the bound plus the sockets' buffers, not the whole body
	if s := sent.Load(); s > 16<<20 {
		t.Errorf("the server sent %d bytes of its %d: the answer was not cut off", s, total)
	} else {
		t.Logf("the server sent %d bytes of its %d; %+v", s, total, got)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("the check allocated %d bytes for a 1 MiB bound", alloc)
	} else {
		t.Logf("allocated %d bytes during the check", alloc)
	}

	// a hostile Prometheus that never answers
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	silent := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	quick := newRunner(t, promcheck.Options{Network: loopback, Timeout: 300 * time.Millisecond})
	got = quick.Run(ctx, "team", compile(t, promcheck.Check{Name: "silent", Address: silent, Query: "up", Condition: "value < 1.0"}))
	if got.Verdict != promcheck.Inconclusive || !strings.Contains(got.Message, "did not answer within the timeout of 300ms") {
		t.Fatalf("a server that never answers: %+v", got)
	}
	if got.Duration > 5*time.Second {
		t.Errorf("the timeout of 300ms took %s", got.Duration)
	}

	// more series than MaxSamples
	many := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		b.WriteString(`{"status":"success","data":{"resultType":"vector","result":[`)
		for i := range 1001 {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"metric":{"i":"%d"},"value":[1,"1"]}`, i)
		}
		b.WriteString("]}}")
		_, _ = io.WriteString(w, b.String())
	})
	got = r.Run(ctx, "team", compile(t, promcheck.Check{Name: "many", Address: many, Query: "up", Condition: "result.size() > 0"}))
	if got.Verdict != promcheck.Inconclusive || !strings.Contains(got.Message, "returned 1001 series, over the limit of 1000") {
		t.Fatalf("1001 series: %+v", got)
	}

	// other answers: their words are not shown
	for _, tc := range []struct {
		status int
		body   string
		want   string
	}{
		{500, "internal secret stack trace", "Prometheus answered 500 Internal Server Error"},
		{200, "<html>not prometheus</html>", "is not the JSON of Prometheus' query API"},
		{503, `{"status":"error","errorType":"unavailable","error":"overloaded"}`, "(unavailable): overloaded"},
	} {
		addr := hostile(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			_, _ = io.WriteString(w, tc.body)
		})
		got := r.Run(ctx, "team", compile(t, promcheck.Check{Name: "other", Address: addr, Query: "up", Condition: "value < 1.0"}))
		if got.Verdict != promcheck.Inconclusive || !strings.Contains(got.Message, tc.want) || strings.Contains(got.Message, "secret") {
			t.Errorf("%d %q: %+v; want Inconclusive with %q", tc.status, tc.body, got, tc.want)
		}
	}
}

// 6. With the default network rules the Prometheus on 127.0.0.1 is refused: Invalid, not
// allowed, naming the rule and not how a connection went.
func TestGuardRefusesLoopbackByDefault(t *testing.T) {
	ctx := testCtx(t)
	env := startProm(t)
	r := newRunner(t, promcheck.Options{})
	got := r.Run(ctx, "team", compile(t, promcheck.Check{Name: "g", Address: env.prom.URL(), Query: "vector(1)", Condition: "value == 1.0"}))
	if got.Verdict != promcheck.Invalid {
		t.Fatalf("%+v: want Invalid", got)
	}
	mustContain(t, "Message", got.Message, "the address is not allowed", "loopback")
	if strings.Contains(got.Message, "refused") && !strings.Contains(got.Message, "not allowed") {
		t.Errorf("%q tells how the connection went", got.Message)
	}
	t.Logf("%+v", got)
	// the same check with loopback allowed passes: the refusal was the rule
	if got := newRunner(t, promcheck.Options{Network: loopback}).Run(ctx, "team",
		compile(t, promcheck.Check{Name: "g", Address: env.prom.URL(), Query: "vector(1)", Condition: "value == 1.0"})); got.Verdict != promcheck.Passed {
		t.Fatalf("with 127.0.0.0/8 allowed: %+v", got)
	}
}

// 7. Fair share: with 2 slots, namespace "a" running 2 checks against a stalled server holds
// one slot; "b"'s check against the real Prometheus runs in the other and completes while both
// of "a"'s are still waiting.
func TestFairShare(t *testing.T) {
	ctx := testCtx(t)
	env := startProm(t)
	var inflight, maxInflight atomic.Int64
	release := make(chan struct{})
	stalled := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for m := maxInflight.Load(); n > m && !maxInflight.CompareAndSwap(m, n); m = maxInflight.Load() {
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	r := newRunner(t, promcheck.Options{Network: loopback, Slots: 2, Timeout: 5 * time.Second})
	slow := compile(t, promcheck.Check{Name: "slow", Address: stalled, Query: "up", Condition: "value < 1.0"})
	quick := compile(t, promcheck.Check{Name: "quick", Address: env.prom.URL(), Query: "vector(1)", Condition: "value == 1.0"})

	var aDone atomic.Int64
	aResults := make([]promcheck.Result, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			aResults[i] = r.Run(ctx, "a", slow)
			aDone.Add(1)
		}()
	}
	if err := fluxenv.WaitFor(ctx, 4*time.Second, `one of "a"'s queries at the stalled server`, func(context.Context) (bool, string, error) {
		return inflight.Load() >= 1, fmt.Sprintf("%d in flight", inflight.Load()), nil
	}); err != nil {
		t.Fatal(err)
	}
	got := r.Run(ctx, "b", quick)
	doneBefore := aDone.Load()
	if got.Verdict != promcheck.Passed {
		t.Fatalf(`"b": %+v`, got)
	}
	if doneBefore != 0 {
		t.Fatalf(`%d of "a"'s checks ended before "b"'s: "b" waited for them`, doneBefore)
	}
	if m := maxInflight.Load(); m != 1 {
		t.Fatalf(`"a" had %d queries at once; its share of 2 slots is 1`, m)
	}
	t.Logf(`"b" passed in %s while "a" held its share`, got.Duration.Round(time.Millisecond))
	wg.Wait()
	close(release)
	waited := 0
	for _, res := range aResults {
		if res.Verdict != promcheck.Inconclusive {
			t.Errorf(`"a": %+v; want Inconclusive`, res)
		}
		// it timed out waiting, or got the slot in the last moment of its timeout
		if strings.Contains(res.Message, "no query slot was free") || strings.Contains(res.Message, "waiting for a query slot") {
			waited++
		}
	}
	t.Logf(`"a": %+v`, aResults)
	if waited != 1 {
		t.Errorf(`"a"'s results %+v: want one that never had a slot`, aResults)
	}
}

// 8. Credentials: a bearer token and basic auth reach the server; a wrong one is Inconclusive
// (401) and no message shows them, even when a hostile server echoes them back.
func TestAuth(t *testing.T) {
	ctx := testCtx(t)
	const token, user, pass = "tok-3f9a1c", "grafana", "pa55-77b2e"
	vector := `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"0.01"]}]}}`
	addr := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		u, p, basic := r.BasicAuth()
		if got == "Bearer "+token || (basic && u == user && p == pass) {
			_, _ = io.WriteString(w, vector)
			return
		}
		// hostile: echo the credentials back, in a body and in Prometheus' error
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("query") == "echo" {
			w.WriteHeader(http.StatusBadRequest)
			msg, _ := json.Marshal("parse error near " + got)
			fmt.Fprintf(w, `{"status":"error","errorType":"bad_data","error":%s}`, msg)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"status":"error","error":"bad credentials %q"}`, got)
	})
	r := newRunner(t, promcheck.Options{Network: loopback})
	run := func(query string, a *promcheck.Auth) promcheck.Result {
		return r.Run(ctx, "team", compile(t, promcheck.Check{Name: "auth", Address: addr, Query: query, Condition: "value < 0.05", Auth: a}))
	}
	if got := run("up", &promcheck.Auth{BearerToken: token}); got.Verdict != promcheck.Passed || got.Value != "0.01" {
		t.Fatalf("bearer: %+v", got)
	}
	if got := run("up", &promcheck.Auth{Username: user, Password: pass}); got.Verdict != promcheck.Passed {
		t.Fatalf("basic: %+v", got)
	}
	secrets := []string{token + "x", pass + "x", base64.StdEncoding.EncodeToString([]byte(user + ":" + pass + "x"))}
	for _, a := range []*promcheck.Auth{{BearerToken: token + "x"}, {Username: user, Password: pass + "x"}} {
		for _, q := range []string{"up", "echo"} {
			got := run(q, a)
			if got.Verdict == promcheck.Passed || got.Verdict == promcheck.Failed {
				t.Errorf("wrong credentials, %s: %+v", q, got)
			}
			if q == "up" && !strings.Contains(got.Message, "401") {
				t.Errorf("wrong credentials: %+v; want the 401 said", got)
			}
			if q == "echo" && (got.Verdict != promcheck.Invalid || !strings.Contains(got.Message, "parse error near")) {
				t.Errorf("an error echoing the credentials: %+v; want Prometheus' error shown, the credentials removed", got)
			}
			for _, s := range secrets {
				if strings.Contains(got.Message, s) || strings.Contains(got.Value, s) {
					t.Errorf("the result %+v shows a credential", got)
				}
			}
			t.Logf("%s: %+v", q, got)
		}
	}
}
