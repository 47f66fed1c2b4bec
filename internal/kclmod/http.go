package kclmod

import (
	"errors"
	"fmt"
	"net/http"
)

// HTTP reaches HTTP servers that a tenant names for a request other than a dependency: the
// Prometheus of a release check (internal/promcheck). It goes through the same guard as
// dependency fetches and pushes: every request's host must be in Options.AllowedHosts, every
// connection's address (after name resolution, redirects included) must pass the address rules
// (this host's own addresses and the special ranges refused unless AllowedNetworks admits them,
// DeniedNetworks refused), answers are held to the transfer bounds (MinSpeed over LowSpeedTime;
// 8 MiB at most), and no proxy is taken from the environment (only Options.Proxy). Only Options'
// network fields are read.
//
// A refusal is an error wrapping ErrHostNotAllowed that names the host and the rule, never how a
// connection went; a transfer stopped by a bound is a *BoundError. Unlike dependency fetches,
// an error answer's body is kept for the caller (read under the same bounds): a Prometheus says
// why it refused a query there.
type HTTP struct {
	net    *netGuard
	client *http.Client
}

// NewHTTP returns an HTTP going through the guard of o's network fields.
func NewHTTP(o Options) (*HTTP, error) {
	guard, err := guardOf(o)
	if err != nil {
		return nil, err
	}
	h := &HTTP{net: guard}
	h.client = h.clientOver(guard.tr)
	return h, nil
}

// Client returns the client of h, shared by its callers (its connections are kept for reuse).
// It has no overall timeout: callers bound each request with its context.
func (h *HTTP) Client() *http.Client { return h.client }

// ClientTrusting returns a client like Client whose https requests also trust the PEM
// certificates of caPEM (a Secret's ca.crt), besides the system's roots. It has connections of
// its own, so a CA given for one server vouches for nothing reached through Client; the caller
// calls CloseIdleConnections when done with it.
func (h *HTTP) ClientTrusting(caPEM []byte) (*http.Client, error) {
	tr, err := h.net.trusting(caPEM)
	if err != nil {
		return nil, err
	}
	return h.clientOver(tr), nil
}

func (h *HTTP) clientOver(tr *http.Transport) *http.Client {
	rt := bounded{b: h.net.bounds, next: hostCheck{h.net.policy, tr}, errorBodies: true}
	return &http.Client{Transport: httpCall{g: h.net, tr: tr, next: rt}, CheckRedirect: httpCheckRedirect}
}

// httpCall runs each exchange with a call guard of its own, so that a refusal is reported as the
// guard's rule whatever the transport made of it.
type httpCall struct {
	g    *netGuard
	tr   *http.Transport
	next http.RoundTripper
}

func (c httpCall) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cg := c.g.withCall(req.Context())
	resp, err := c.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		if na := cg.notAllowed(req.URL.Host, err); na != nil {
			return nil, na
		}
		if be := cg.boundBroken(); be != nil {
			return nil, be
		}
		return nil, err
	}
	return resp, nil
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the transport.
func (c httpCall) CloseIdleConnections() { c.tr.CloseIdleConnections() }

// maxRedirects is how many redirects one request follows, as net/http's default.
const maxRedirects = 10

// httpCheckRedirect refuses redirects from https to http and drops the credentials of a redirect
// to another scheme, host or port (net/http would send them on to a subdomain); each redirect is
// a request of its own through the guard.
func httpCheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	first := via[0].URL
	if first.Scheme == "https" && req.URL.Scheme != "https" {
		return errors.New("redirect from https to http refused")
	}
	if req.URL.Scheme != first.Scheme || hostPort(req.URL) != hostPort(first) {
		req.Header.Del("Authorization")
	}
	return nil
}
