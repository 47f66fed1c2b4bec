// Package promcheck verifies a release by its metrics (#58): a check runs a tenant's PromQL
// instant query against a Prometheus the tenant names, and a CEL condition over the result
// decides whether the release passed.
//
// The address, the query and the condition are a tenant's, and a tenant may be hostile: the
// "Prometheus" may be an internal service it wants to probe, a server that never answers, or one
// that streams gigabytes. Everything a check can spend is bounded:
//
//   - the network guard of dependency fetches (kclmod.HTTP): allowed hosts, the address rules
//     after name resolution and on every redirect (this host's own addresses and private and
//     special ranges refused unless the operator allows them), no proxy from the environment.
//     A refused address is Invalid: it will never work, and the message names the rule, never
//     how a connection went.
//   - Options.Timeout (default 10s) per check, the wait for a query slot included. A healthy
//     Prometheus answers an instant query in milliseconds to a few seconds; 10s is also under
//     fairshare.DefaultSlice (15s), so a check in the fast lane is never cut short.
//   - Options.MaxResponseBytes (default 1 MiB), counted while reading (the rest is never read:
//     the connection is dropped). MaxSamples series of a dozen labels are some 300 KB of JSON;
//     a larger answer is a query that selects too much, or a server that is not Prometheus.
//   - Options.MaxSamples (default 1000) series in a result: a condition looks at a handful of
//     series (usually one, aggregated); 1000 keeps a comprehension over them far within the
//     conditions' cost limit.
//   - Options.Slots (default 4) queries at once for all namespaces, one namespace holding at
//     most half of them (fairshare.Limiter): a tenant whose Prometheus is slow delays its own
//     checks, not the others'. The slots bound the controller's open requests, not its CPU:
//     a query is a wait.
//   - MaxQueryLength (8 KiB): the query travels in the URL of a GET, and proxies and servers
//     commonly refuse request lines much longer.
//   - the condition: compiled and run by inputexpr (CompileCondition), with the cost limit, time
//     budget and size bounds of argument expressions.
//
// Credentials (Auth) are sent as a header and never appear in a message: what a server says is
// shown only as Prometheus' own error of a refused query (the tenant's query quoted back),
// escaped, cut to MaxMessageBytes, and with the credentials' text removed should a hostile
// server echo them.
package promcheck

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"

	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputexpr"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

// Defaults of Options; see the package comment for why these figures.
const (
	DefaultSlots            = 4
	DefaultTimeout          = 10 * time.Second
	DefaultMaxResponseBytes = int64(1 << 20)
	DefaultMaxSamples       = 1000
)

// Fixed bounds.
const (
	// MaxQueryLength is the longest query, in bytes.
	MaxQueryLength = 8 << 10
	// MaxMessageBytes is the longest Result.Message; a longer one (a parse error quoting a long
	// query) is cut.
	MaxMessageBytes = 1024
)

// Options configure a Runner.
type Options struct {
	// Network is the guard: only its network fields are read (AllowedHosts, AllowedNetworks,
	// DeniedNetworks, Proxy, Transport, MinSpeed, LowSpeedTime).
	Network kclmod.Options
	// Slots is how many queries run at once, all namespaces together; one namespace holds at
	// most half of them (at least one). 0: DefaultSlots.
	Slots int
	// Timeout bounds one check, the wait for a slot included. 0: DefaultTimeout.
	Timeout time.Duration
	// MaxResponseBytes bounds Prometheus' answer. 0: DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// MaxSamples bounds the series of a result. 0: DefaultMaxSamples.
	MaxSamples int
}

// Verdict is the outcome of a check.
type Verdict string

const (
	// Passed: the query answered and the condition held.
	Passed Verdict = "Passed"
	// Failed: the query answered and the condition did not hold.
	Failed Verdict = "Failed"
	// Inconclusive: no verdict this time (Prometheus down, slow or overloaded, an answer over
	// the bounds, a result the condition cannot use: no sample, several for `value`); trying
	// again later may give one.
	Inconclusive Verdict = "Inconclusive"
	// Invalid: the check can never give a verdict as written (the address is not allowed, the
	// query does not parse, the condition does not compile or returns no bool): the tenant must
	// change it.
	Invalid Verdict = "Invalid"
)

// Result is the outcome of one run of a check.
type Result struct {
	Verdict Verdict
	// Value is the result in short, for a status: the value of a single sample ("0.012"),
	// "3 series", "no sample"; empty when the query gave no result.
	Value string
	// Message says why: the condition held or not, or the cause of Invalid and Inconclusive.
	Message string
	// Duration is the time the run took, the wait for a slot included.
	Duration time.Duration
}

// Check is a release check as a KCLArtifact names it.
type Check struct {
	Name string
	// Address is the base URL of Prometheus, http:// or https://, with an optional path prefix
	// (https://prom.example/prometheus): the query goes to <Address>/api/v1/query.
	Address string
	// Query is a PromQL expression evaluated at the current time (an instant query).
	Query string
	// Condition is a CEL expression returning a bool over
	//
	//	result: list(map(string, dyn)) — each series as {"labels": map(string, string), "value": double}
	//	value:  double — the value of the only series; reading it when the query returned none, or
	//	        several, makes the check Inconclusive
	//
	// A scalar result is one series without labels. A NaN value (a ratio of 0/0: no requests in
	// the window) compares false with everything, so `value < 0.05` is Failed; +Inf and -Inf
	// compare as numbers.
	Condition string
	// Auth, if set, is sent with the query.
	Auth *Auth
}

// Auth is how a check authenticates to Prometheus, read from the Secret of its secretRef:
// the keys `username` and `password` (basic auth), or `token` (a bearer token), and `ca.crt`
// (PEM certificates trusted for an https address besides the system's roots; optional, alone
// or with either).
type Auth struct {
	Username, Password string
	BearerToken        string
	CA                 []byte
}

// Compiled is a check validated and its condition compiled; safe for concurrent Run.
type Compiled struct {
	check Check
	base  string // Address without a trailing /
	cond  *inputexpr.Condition
}

// Name is the check's name.
func (c *Compiled) Name() string { return c.check.Name }

// conditionVars are the variables of a condition.
var conditionVars = map[string]*cel.Type{
	"result": cel.ListType(cel.MapType(cel.StringType, cel.DynType)),
	"value":  cel.DoubleType,
}

// Compile validates c: the address is an http or https URL with a host and without user
// information, query or fragment; the query is not empty and within MaxQueryLength; the
// condition compiles and returns a bool; Auth is basic or bearer, not both, and its CA holds a
// PEM certificate. An error means the check is Invalid; its message is for the tenant and holds
// no credentials.
func Compile(c Check) (*Compiled, error) {
	base, err := checkAddress(c.Address)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(c.Query) == "" {
		return nil, errors.New("the query is empty")
	}
	if len(c.Query) > MaxQueryLength {
		return nil, fmt.Errorf("the query is %d bytes, over the limit of %d bytes", len(c.Query), MaxQueryLength)
	}
	if !utf8.ValidString(c.Query) {
		return nil, errors.New("the query is not valid UTF-8")
	}
	if a := c.Auth; a != nil {
		if a.BearerToken != "" && (a.Username != "" || a.Password != "") {
			return nil, errors.New("the Secret holds both a token and a username or password: give one way to authenticate")
		}
		if a.Password != "" && a.Username == "" {
			return nil, errors.New("the Secret holds a password without a username")
		}
		if len(a.CA) > 0 && !x509.NewCertPool().AppendCertsFromPEM(a.CA) {
			return nil, errors.New("the Secret's ca.crt holds no PEM certificate")
		}
		if strings.ContainsAny(a.BearerToken+a.Username+a.Password, "\r\n") {
			return nil, errors.New("the Secret's credentials hold a line break")
		}
	}
	cond, err := inputexpr.CompileCondition(c.Condition, conditionVars)
	if err != nil {
		return nil, err
	}
	return &Compiled{check: c, base: base, cond: cond}, nil
}

func checkAddress(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return "", fmt.Errorf("the address %q is not an http:// or https:// URL with a host", termsafe.Line(cut(s, 200)))
	}
	if u.User != nil {
		// never echoed: it holds credentials
		return "", errors.New("the address holds user information (user:password@): give credentials in the Secret of secretRef")
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(s, "#") {
		return "", fmt.Errorf("the address %q has a query or fragment: give Prometheus' base URL", termsafe.Line(cut(s, 200)))
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// Runner runs checks, sharing the query slots between namespaces.
type Runner struct {
	o     Options
	http  *kclmod.HTTP
	slots *fairshare.Limiter
}

// New returns a Runner of o (defaults filled in).
func New(o Options) (*Runner, error) {
	if o.Slots <= 0 {
		o.Slots = DefaultSlots
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.MaxSamples <= 0 {
		o.MaxSamples = DefaultMaxSamples
	}
	h, err := kclmod.NewHTTP(o.Network)
	if err != nil {
		return nil, err
	}
	return &Runner{o: o, http: h, slots: fairshare.NewLimiter(o.Slots, fairshare.Share(o.Slots, 0))}, nil
}

// Run runs c for namespace: it waits for a slot within namespace's share, queries Prometheus
// and evaluates the condition, all within Options.Timeout and ctx.
func (r *Runner) Run(ctx context.Context, namespace string, c *Compiled) Result {
	start := time.Now()
	res := r.run(ctx, namespace, c)
	res.Duration = time.Since(start)
	res.Message = scrub(res.Message, c.check.Auth)
	res.Value = scrub(res.Value, c.check.Auth)
	return res
}

func (r *Runner) run(ctx context.Context, namespace string, c *Compiled) Result {
	start := time.Now()
	tctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	hctx, release, err := r.slots.AcquireCuttable(tctx, namespace)
	if err != nil {
		if ctx.Err() != nil {
			return inconclusive("the check was cancelled before it ran")
		}
		return inconclusive(fmt.Sprintf("no query slot was free within the timeout of %s: this namespace's other checks hold its share", r.o.Timeout))
	}
	defer release()
	samples, res, ok := r.query(ctx, hctx, c, time.Since(start))
	if !ok {
		return res
	}
	return evaluate(hctx, c, samples)
}

func inconclusive(msg string) Result { return Result{Verdict: Inconclusive, Message: msg} }
func invalid(msg string) Result      { return Result{Verdict: Invalid, Message: msg} }

// sample is one series of a result.
type sample struct {
	labels map[string]string
	value  float64
}

// apiAnswer is the envelope of Prometheus' HTTP API.
type apiAnswer struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

// query runs c's query; ok is false when res is the outcome already. parent is the caller's
// context, ctx the check's (within the timeout and the slot), waited the time the slot took.
func (r *Runner) query(parent, ctx context.Context, c *Compiled, waited time.Duration) (samples []sample, res Result, ok bool) {
	u := c.base + "/api/v1/query?" + url.Values{"query": {c.check.Query}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, invalid("the address cannot be queried: " + err.Error()), false
	}
	req.Header.Set("Accept", "application/json")
	client := r.http.Client()
	if a := c.check.Auth; a != nil {
		switch {
		case a.BearerToken != "":
			req.Header.Set("Authorization", "Bearer "+a.BearerToken)
		case a.Username != "":
			req.SetBasicAuth(a.Username, a.Password)
		}
		if len(a.CA) > 0 && req.URL.Scheme == "https" {
			tc, err := r.http.ClientTrusting(a.CA)
			if err != nil {
				return nil, invalid(err.Error()), false
			}
			defer tc.CloseIdleConnections()
			client = tc
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, r.failure(parent, ctx, err, waited), false
	}
	defer resp.Body.Close()
	max := r.o.MaxResponseBytes
	if resp.ContentLength > max {
		return nil, inconclusive(fmt.Sprintf("Prometheus answered %d bytes, over the limit of %s: narrow the query (aggregate it)",
			resp.ContentLength, size(max))), false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, r.failure(parent, ctx, err, waited), false
	}
	if int64(len(body)) > max {
		return nil, inconclusive(fmt.Sprintf("Prometheus' answer is over %s, the limit; it was not read further: narrow the query (aggregate it)",
			size(max))), false
	}
	var a apiAnswer
	jerr := json.Unmarshal(body, &a)
	if resp.StatusCode != http.StatusOK {
		return nil, statusFailure(resp, a, jerr), false
	}
	if jerr != nil || a.Status != "success" {
		return nil, inconclusive(fmt.Sprintf("the answer of %s is not the JSON of Prometheus' query API", req.URL.Host)), false
	}
	return r.samples(a)
}

// statusFailure is the outcome of an answer other than 200. Prometheus' own error of a query
// that does not parse (400, bad_data) makes the check Invalid; its text is the tenant's query
// quoted back. Nothing else of a body is shown.
func statusFailure(resp *http.Response, a apiAnswer, jerr error) Result {
	promErr := jerr == nil && a.Status == "error" && a.Error != ""
	switch {
	case resp.StatusCode == http.StatusBadRequest && promErr && a.ErrorType == "bad_data":
		return invalid("Prometheus refused the query: " + a.Error)
	case resp.StatusCode == http.StatusUnprocessableEntity && promErr:
		return inconclusive(fmt.Sprintf("Prometheus could not run the query (%s): %s", a.ErrorType, a.Error))
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return inconclusive(fmt.Sprintf("Prometheus answered %s: check the credentials of the Secret of secretRef", resp.Status))
	case promErr && (a.ErrorType == "timeout" || a.ErrorType == "canceled" || a.ErrorType == "unavailable"):
		return inconclusive(fmt.Sprintf("Prometheus answered %s (%s): %s", resp.Status, a.ErrorType, a.Error))
	}
	return inconclusive("Prometheus answered " + resp.Status)
}

// failure words a request that got no complete answer; waited is the time spent waiting for
// the slot, told when it took a tenth of the timeout or more.
func (r *Runner) failure(parent, ctx context.Context, err error, waited time.Duration) Result {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // not the URL: the query is in it, long
	}
	var be *kclmod.BoundError
	switch {
	case errors.Is(err, kclmod.ErrHostNotAllowed):
		return invalid("the address is not allowed: " + strings.TrimPrefix(err.Error(), kclmod.ErrHostNotAllowed.Error()+": "))
	case errors.As(err, &be):
		return inconclusive("the answer was stopped: " + be.Error())
	case parent.Err() != nil:
		return inconclusive("the check was cancelled")
	case fairshare.CutShort(ctx, err):
		return inconclusive(fairshare.ErrCut.Error())
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		msg := fmt.Sprintf("Prometheus did not answer within the timeout of %s", r.o.Timeout)
		if waited >= r.o.Timeout/10 {
			msg += fmt.Sprintf(" (%s of it waiting for a query slot: this namespace's other checks held its share)", waited.Round(time.Millisecond))
		}
		return inconclusive(msg)
	case errors.Is(err, syscall.ECONNREFUSED):
		return inconclusive("connection refused: Prometheus is down or not listening at the address")
	}
	return inconclusive("the query failed: " + err.Error())
}

// samples reads a successful answer's result: an instant vector or a scalar.
func (r *Runner) samples(a apiAnswer) ([]sample, Result, bool) {
	notAPI := inconclusive("the answer's result is not Prometheus' JSON")
	switch a.Data.ResultType {
	case "vector":
		var vec []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(a.Data.Result, &vec); err != nil {
			return nil, notAPI, false
		}
		if len(vec) > r.o.MaxSamples {
			return nil, Result{Verdict: Inconclusive, Value: fmt.Sprintf("%d series", len(vec)), Message: fmt.Sprintf(
				"the query returned %d series, over the limit of %d: aggregate it (sum, max, topk)", len(vec), r.o.MaxSamples)}, false
		}
		out := make([]sample, 0, len(vec))
		for _, s := range vec {
			v, err := promValue(s.Value[1])
			if err != nil {
				return nil, notAPI, false
			}
			out = append(out, sample{labels: s.Metric, value: v})
		}
		return out, Result{}, true
	case "scalar":
		var s [2]any
		if err := json.Unmarshal(a.Data.Result, &s); err != nil {
			return nil, notAPI, false
		}
		v, err := promValue(s[1])
		if err != nil {
			return nil, notAPI, false
		}
		return []sample{{labels: map[string]string{}, value: v}}, Result{}, true
	case "matrix":
		return nil, invalid("the query returns a range vector (matrix): a check needs an instant vector or a scalar; " +
			"wrap the range in a function (rate(x[5m]), max_over_time(x[5m]))"), false
	case "string":
		return nil, invalid("the query returns a string: a check needs an instant vector or a scalar"), false
	}
	return nil, notAPI, false
}

// promValue parses a sample value of the HTTP API: a string ("1.5", "NaN", "+Inf").
func promValue(v any) (float64, error) {
	s, ok := v.(string)
	if !ok {
		return 0, errors.New("not a string")
	}
	return strconv.ParseFloat(s, 64)
}

// sampleCount is the error value of `value` when the result is not one sample.
type sampleCount struct{ n int }

func (e *sampleCount) Error() string {
	if e.n == 0 {
		return "the query returned no sample"
	}
	return fmt.Sprintf("the query returned %d series: use result, or aggregate (sum, max)", e.n)
}

// evaluate runs the condition over the samples.
func evaluate(ctx context.Context, c *Compiled, samples []sample) Result {
	result := make([]any, len(samples))
	nan := false
	for i, s := range samples {
		labels := make(map[string]any, len(s.labels))
		for k, v := range s.labels {
			labels[k] = v
		}
		result[i] = map[string]any{"labels": labels, "value": s.value}
		nan = nan || math.IsNaN(s.value)
	}
	act := map[string]any{"result": result}
	var shown string
	switch len(samples) {
	case 1:
		act["value"] = samples[0].value
		shown = strconv.FormatFloat(samples[0].value, 'g', 4, 64)
	case 0:
		act["value"] = types.WrapErr(&sampleCount{0})
		shown = "no sample"
	default:
		act["value"] = types.WrapErr(&sampleCount{len(samples)})
		shown = fmt.Sprintf("%d series", len(samples))
	}
	ok, err := c.cond.Eval(ctx, act)
	var sc *sampleCount
	switch {
	case errors.As(err, &sc):
		return Result{Verdict: Inconclusive, Value: shown, Message: sc.Error()}
	case err != nil && strings.Contains(err.Error(), ", not a bool"):
		return Result{Verdict: Invalid, Value: shown, Message: err.Error()}
	case err != nil:
		return Result{Verdict: Inconclusive, Value: shown, Message: err.Error()}
	case ok:
		return Result{Verdict: Passed, Value: shown, Message: "the condition held"}
	}
	msg := "the condition did not hold"
	if nan {
		msg += " (a value is NaN, which compares false with everything: no data in the query's window?)"
	}
	return Result{Verdict: Failed, Value: shown, Message: msg}
}

// scrub makes a message safe to show: credentials a server echoed removed, terminal escapes
// escaped, cut to MaxMessageBytes.
func scrub(s string, a *Auth) string {
	if a != nil {
		var secrets []string
		if a.Password != "" {
			secrets = append(secrets, a.Password,
				base64.StdEncoding.EncodeToString([]byte(a.Username+":"+a.Password)))
		}
		if a.BearerToken != "" {
			secrets = append(secrets, a.BearerToken)
		}
		for _, sec := range secrets {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		}
	}
	return cut(termsafe.Line(s), MaxMessageBytes)
}

// cut shortens s to at most n bytes, on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// size writes a byte count as the bounds are written: 1 MiB, 64 KiB, 1000 bytes.
func size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
