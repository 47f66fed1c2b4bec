package kclmod

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// ErrHostNotAllowed is wrapped by the errors of dependencies whose host (or a host it redirected
// to) is not in Options.AllowedHosts or has an address dependencies may not be fetched from.
var ErrHostNotAllowed = errors.New("host not allowed")

// ParseNetworks parses CIDR prefixes ("10.0.0.0/8", "fd00::/8") and single addresses
// ("127.0.0.1"), as Options.AllowedNetworks and Options.DeniedNetworks take them from flags.
func ParseNetworks(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("invalid network %q: %w", s, err)
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("invalid network %q: %w", s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// netPolicy is where a Resolver may fetch from.
type netPolicy struct {
	hosts   []string // lower-case globs; empty: any host
	allowed []netip.Prefix
	denied  []netip.Prefix // the operator's, besides specialRanges
	// hostAddrs lists this host's own addresses: interfaceAddrs, or a fixed list in tests.
	hostAddrs func() ([]netip.Addr, error)
}

func newNetPolicy(o Options) (*netPolicy, error) {
	p := &netPolicy{allowed: unmapPrefixes(o.AllowedNetworks), denied: unmapPrefixes(o.DeniedNetworks), hostAddrs: interfaceAddrs}
	for _, h := range o.AllowedHosts {
		h = strings.ToLower(strings.TrimSpace(h))
		if h == "" {
			continue
		}
		if _, err := path.Match(h, ""); err != nil {
			return nil, fmt.Errorf("kclmod: allowed host %q: %w", h, err)
		}
		p.hosts = append(p.hosts, h)
	}
	return p, nil
}

// interfaceAddrs returns the addresses of this host's interfaces. They are read at every check
// (a netlink dump, some 50 µs, next to a connection's milliseconds), so that an address the host
// gains later is refused from then on: a service listening on all addresses answers on each.
func interfaceAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap().WithZone(""))
			}
		}
	}
	return out, nil
}

// unmapPrefixes turns ::ffff:a.b.c.d/n prefixes into IPv4 ones: addresses are unmapped before
// they are compared, so a mapped prefix would never match.
func unmapPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out
}

// hostAllowed reports whether a URL host (name or IP, optionally with a port) is in the
// allow-list. A pattern with a port matches that port as written; one without, any port.
func (p *netPolicy) hostAllowed(host string) bool {
	if len(p.hosts) == 0 {
		return true
	}
	name, port := splitHostPort(host)
	for _, pat := range p.hosts {
		pname, pport := splitHostPort(pat)
		if pport != "" {
			if ok, _ := path.Match(pport, port); !ok {
				continue
			}
		}
		if ok, _ := path.Match(pname, name); ok {
			return true
		}
	}
	return false
}

// splitHostPort splits "host:port", "[v6]:port", "[v6]", "v6" or "host", lower-cased.
func splitHostPort(s string) (host, port string) {
	s = strings.ToLower(s)
	if h, p, err := net.SplitHostPort(s); err == nil {
		return h, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"), ""
}

// sameHost compares hosts with optional ports; a missing port matches any.
func sameHost(a, b string) bool {
	an, ap := splitHostPort(a)
	bn, bp := splitHostPort(b)
	return an == bn && (ap == "" || bp == "" || ap == bp)
}

// addrAllowed reports whether a connection to a may be made.
func (p *netPolicy) addrAllowed(a netip.Addr) bool { return p.judge(a) == nil }

// judge returns why a connection to a may not be made, or nil. An address AllowedNetworks
// admits skips the rules; one that reaches an IPv4 address through a translator or tunnel
// (NAT64, 6to4, Teredo) must also pass them with that address, admitted or not.
func (p *netPolicy) judge(a netip.Addr) *denial {
	a = a.Unmap().WithZone("")
	by := p.admittedBy(a)
	if !by.IsValid() {
		if d := p.rule(a); d != nil {
			return d
		}
	}
	v4, ok, known := embeddedIPv4(a, by)
	if !ok {
		return nil
	}
	r, _ := specialRangeOf(a)
	if !known {
		return &denial{rng: r.String(), note: "under an allowed network whose length is not one of RFC 6052's (48, 56, 64, 96): " +
			"the IPv4 address it reaches is unknown"}
	}
	if d := p.judge(v4); d != nil {
		return &denial{embeds: v4, via: r.why, inner: d}
	}
	return nil
}

// admittedBy returns the most specific allowed network holding a, if any.
func (p *netPolicy) admittedBy(a netip.Addr) netip.Prefix {
	var by netip.Prefix
	for _, n := range p.allowed {
		if n.Contains(a) && (!by.IsValid() || n.Bits() > by.Bits()) {
			by = n
		}
	}
	return by
}

// rule returns why a, not admitted, is refused: one of this host's own addresses, in a special
// range, or in a network the operator denied.
func (p *netPolicy) rule(a netip.Addr) *denial {
	own, err := p.isOwn(a)
	if err != nil {
		return &denial{note: "could not be checked: this host's addresses could not be read"}
	}
	d := &denial{own: own}
	if r, ok := specialRangeOf(a); ok && !r.translated {
		d.rng = r.String()
	} else {
		for _, n := range p.denied {
			if n.Contains(a) {
				d.rng = n.String() + " (a denied network)"
				break
			}
		}
	}
	if !d.own && d.rng == "" {
		return nil
	}
	return d
}

func (p *netPolicy) isOwn(a netip.Addr) (bool, error) {
	addrs, err := p.hostAddrs()
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(addrs, func(h netip.Addr) bool { return h.Unmap().WithZone("") == a }), nil
}

// denial is why an address is refused. It names the range and what the range is, never more of
// the network than that: the address itself only when the tenant wrote it (see describe).
type denial struct {
	own  bool   // one of this host's own addresses
	rng  string // the range it is in: "192.0.2.0/24 (documentation, RFC 5737)"
	note string // a reason of its own, after the range if any
	// embeds is the IPv4 address the refused address reaches through via ("NAT64, RFC 6052"),
	// refused for inner.
	embeds netip.Addr
	via    string
	inner  *denial
}

// describe says why subject (the address as the tenant wrote it, or "its address" for a name,
// whose addresses are not told) is refused.
func (d *denial) describe(subject string, literal bool) string {
	switch {
	case d.inner != nil:
		v4 := "an IPv4 address"
		if literal {
			v4 = d.embeds.String()
		}
		return fmt.Sprintf("%s reaches %s (%s), which %s", subject, v4, d.via, strings.TrimPrefix(d.inner.describe("", literal), " "))
	case d.note != "" && d.rng != "":
		return fmt.Sprintf("%s is in %s, %s", subject, d.rng, d.note)
	case d.note != "":
		return subject + " " + d.note
	case d.own && d.rng != "":
		return fmt.Sprintf("%s is one of this host's own addresses and in %s", subject, d.rng)
	case d.own:
		return subject + " is one of this host's own addresses"
	}
	return fmt.Sprintf("%s is in %s", subject, d.rng)
}

// notAllowedError is a request or connection the guard refused. The resolver reports it as
// ErrHostNotAllowed, without the transport's wording.
type notAllowedError struct {
	host    string // the URL host refused
	address bool   // refused for the address it resolved to, not its name
	addr    netip.Addr
	why     *denial // for an address; nil when it could not be parsed
}

func (e *notAllowedError) Error() string {
	if e.address {
		return fmt.Sprintf("connection to %s refused: address not allowed", e.host)
	}
	return fmt.Sprintf("request to %s refused: host not allowed", e.host)
}

// reason says why the address was refused, naming it only when host is that address written
// out: the addresses a name resolves to stay unsaid (a tenant could map internal names).
func (e *notAllowedError) reason() string {
	if e.why == nil {
		return "its address could not be checked"
	}
	name, _ := splitHostPort(e.host)
	if a, err := netip.ParseAddr(name); err == nil && a.Unmap().WithZone("") == e.addr.Unmap().WithZone("") {
		return e.why.describe(e.addr.Unmap().WithZone("").String(), true)
	}
	return e.why.describe("its address", false)
}

// control runs for every connection after name resolution and before connect, on the address
// actually dialed: a name that resolves, or later re-resolves, to a forbidden address is caught.
func (p *netPolicy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &notAllowedError{host: address, address: true}
	}
	if d := p.judge(ap.Addr()); d != nil {
		return &notAllowedError{host: address, address: true, addr: ap.Addr(), why: d}
	}
	return nil
}

// netGuard carries a Resolver's requests (registry and Git) under its policy.
type netGuard struct {
	policy *netPolicy
	bounds transferBounds
	tr     *http.Transport // the checking transport under rt
	rt     http.RoundTripper
}

// newNetGuard wraps base (nil: a transport like go-containerregistry's default, without a proxy) so
// that every request and every connection is checked. A base transport is cloned, never shared
// with other Resolvers: its idle connections, dialed under this policy, must not serve another.
func newNetGuard(p *netPolicy, bounds transferBounds, base http.RoundTripper) (*netGuard, error) {
	var tr *http.Transport
	switch b := base.(type) {
	case nil:
		// go-containerregistry's DefaultTransport without its Proxy: a proxy would connect on
		// our behalf, out of reach of the address checks
		tr = &http.Transport{ForceAttemptHTTP2: true, MaxIdleConns: 100, MaxIdleConnsPerHost: 50,
			IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second, ExpectContinueTimeout: time.Second}
	case *http.Transport:
		tr = b.Clone()
	default:
		return nil, fmt.Errorf("kclmod: Transport must be an *http.Transport (its connections are checked), not %T", base)
	}
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: p.control}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		var nae *notAllowedError
		if errors.As(err, &nae) {
			err = refuse(ctx, notAllowedError{host: addr, address: true, addr: nae.addr, why: nae.why})
		}
		return c, err
	}
	// a TLS dialer of the base transport would connect without the checks
	tr.DialTLSContext, tr.DialTLS = nil, nil //nolint:staticcheck // DialTLS too
	return &netGuard{policy: p, bounds: bounds, tr: tr, rt: bounded{b: bounds, next: hostCheck{p, tr}}}, nil
}

// hostCheck refuses requests to hosts outside the allow-list; every redirect and token request
// goes through it too.
type hostCheck struct {
	p    *netPolicy
	next http.RoundTripper
}

func (h hostCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	if (req.URL.Scheme != "http" && req.URL.Scheme != "https") || !h.p.hostAllowed(req.URL.Host) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, refuse(req.Context(), notAllowedError{host: req.URL.Host})
	}
	return h.next.RoundTrip(req)
}

// callGuard is one fetch's guard: the Resolver's, plus the refusals seen, which the fetch reports
// whatever its transport made of them.
type callGuard struct {
	*netGuard
	// gitRT, when set, carries the fetch's Git requests instead of rt (see trustCAs).
	gitRT   http.RoundTripper
	mu      sync.Mutex
	refused []notAllowedError
	bound   *BoundError // the first transfer stopped by a bound
}

func (cg *callGuard) recordBound(e *BoundError) {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	if cg.bound == nil {
		cg.bound = e
	}
}

// boundBroken returns the first bound a transfer of the call broke, if any.
func (cg *callGuard) boundBroken() error {
	cg.mu.Lock()
	defer cg.mu.Unlock()
	if cg.bound == nil {
		return nil
	}
	return cg.bound
}

// trustCAs makes the call's Git requests to each https host and port of cas verify the
// server's certificate against the transport's roots (the system's by default) plus that host's
// CA bundle. Other hosts keep the usual roots, so a CA given for one Git server cannot vouch for
// another, even one it redirects to. It must be called before the call's first request; release
// closes the connections it opened.
//
// go-git's own CABundle option is not used: it needs go-git's client transport to be an
// *http.Transport, which would bypass gitDispatch and the guard.
func (cg *callGuard) trustCAs(cas []hostCA) (release func(), err error) {
	byHost := map[string]*http.Transport{}
	release = func() {
		for _, tr := range byHost {
			tr.CloseIdleConnections()
		}
	}
	for _, ca := range cas {
		tr, err := cg.trusting(ca.pem)
		if err != nil {
			release()
			return nil, fmt.Errorf("the Git credentials for %s: %w", ca.host, err)
		}
		byHost[ca.hostPort] = tr
	}
	if len(byHost) > 0 {
		cg.gitRT = bounded{b: cg.bounds, next: hostCheck{cg.policy, caRouter{byHost: byHost, next: cg.tr}}}
	}
	return release, nil
}

// trusting returns a clone of the checking transport that also trusts the PEM certificates.
func (g *netGuard) trusting(pemCerts []byte) (*http.Transport, error) {
	tr := g.tr.Clone()
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{}
	}
	roots := tr.TLSClientConfig.RootCAs
	if roots != nil {
		roots = roots.Clone()
	} else if sys, err := x509.SystemCertPool(); err == nil {
		roots = sys
	} else {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(pemCerts) {
		return nil, errors.New("its CA bundle (ca.crt) holds no PEM certificate")
	}
	tr.TLSClientConfig.RootCAs = roots
	return tr, nil
}

// caRouter sends https requests to the hosts and ports of byHost through their transport, and
// the others through next.
type caRouter struct {
	byHost map[string]*http.Transport
	next   http.RoundTripper
}

func (c caRouter) RoundTrip(req *http.Request) (*http.Response, error) {
	if tr, ok := c.byHost[hostPort(req.URL)]; ok && req.URL.Scheme == "https" {
		return tr.RoundTrip(req)
	}
	return c.next.RoundTrip(req)
}

type guardKey struct{}

func (g *netGuard) withCall(ctx context.Context) (context.Context, *callGuard) {
	cg := &callGuard{netGuard: g}
	return context.WithValue(ctx, guardKey{}, cg), cg
}

func guardFrom(ctx context.Context) *callGuard {
	cg, _ := ctx.Value(guardKey{}).(*callGuard)
	return cg
}

// refuse records a refusal in the call's guard and returns the error the transport sees.
func refuse(ctx context.Context, e notAllowedError) error {
	if cg := guardFrom(ctx); cg != nil {
		cg.mu.Lock()
		cg.refused = append(cg.refused, e)
		cg.mu.Unlock()
	}
	return &e
}

// notAllowed returns the error to report for a fetch from host (as kcl.mod names it) that
// failed with err, when the guard refused something: only the hosts and the rule, never what
// a host answered or how a connection failed.
func (cg *callGuard) notAllowed(host string, err error) error {
	var e notAllowedError
	cg.mu.Lock()
	if len(cg.refused) > 0 {
		e = cg.refused[0]
	}
	cg.mu.Unlock()
	if e.host == "" {
		var nae *notAllowedError
		if !errors.As(err, &nae) {
			return nil
		}
		e = *nae
	}
	if !sameHost(host, e.host) {
		if e.address {
			return fmt.Errorf("%w: %s redirected to %s, which is not allowed: %s", ErrHostNotAllowed, host, e.host, e.reason())
		}
		return fmt.Errorf("%w: %s redirected to %s, which is not allowed", ErrHostNotAllowed, host, e.host)
	}
	if e.address {
		return fmt.Errorf("%w: %s: %s", ErrHostNotAllowed, host, e.reason())
	}
	return fmt.Errorf("%w: %s is not one of the allowed hosts", ErrHostNotAllowed, host)
}

// go-git v5 has no per-call HTTP client: its transports are a global, unsynchronised table.
// gitTransport is installed there once, at init (before any goroutine can clone), for http and
// https; it carries no policy itself but sends each request through the guard of the fetch
// that made it, found in the request's context. Requests of other go-git users in the process
// (none in this project) carry none and go through http.DefaultTransport as before; those using
// go-git's per-endpoint TLS or proxy options would get an error, as their transport must then
// be an *http.Transport.
var gitTransport = githttp.NewClient(&http.Client{Transport: gitDispatch{}, CheckRedirect: gitCheckRedirect})

func init() {
	client.InstallProtocol("http", gitTransport)
	client.InstallProtocol("https", gitTransport)
}

type gitDispatch struct{}

func (gitDispatch) RoundTrip(req *http.Request) (*http.Response, error) {
	if cg := guardFrom(req.Context()); cg != nil {
		if cg.gitRT != nil {
			return cg.gitRT.RoundTrip(req)
		}
		return cg.rt.RoundTrip(req)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// gitCheckRedirect refuses redirects to hosts outside the allow-list and from https to http,
// and drops the credentials of a redirect to another scheme, host or port: net/http would send
// them on to another port of the same host, or to a subdomain.
func gitCheckRedirect(req *http.Request, via []*http.Request) error {
	cg := guardFrom(req.Context())
	if cg == nil {
		return nil
	}
	if !cg.policy.hostAllowed(req.URL.Host) {
		return refuse(req.Context(), notAllowedError{host: req.URL.Host})
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

// checkGitTransport fails closed when something replaced gitTransport in go-git's table.
func checkGitTransport(scheme string) error {
	if t, ok := client.Protocols[scheme]; !ok || t != transport.Transport(gitTransport) {
		return fmt.Errorf("the go-git %s transport was replaced: refusing to fetch without the network checks", scheme)
	}
	return nil
}

// hostPort is u's lower-case host and port, the port defaulting to the scheme's.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = defaultPort(u.Scheme)
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

func defaultPort(scheme string) string {
	if scheme == "http" {
		return "80"
	}
	return "443"
}

// guardOf is the guard of o's network fields.
func guardOf(o Options) (*netGuard, error) {
	policy, err := newNetPolicy(o)
	if err != nil {
		return nil, err
	}
	guard, err := newNetGuard(policy, newTransferBounds(o), o.Transport)
	if err != nil {
		return nil, err
	}
	if o.Proxy != nil {
		guard.tr.Proxy = http.ProxyURL(o.Proxy)
	}
	return guard, nil
}

// ParseProxy reads a --kcl-deps-proxy value: empty for none, else an http:// or https:// URL
// with a host.
func ParseProxy(s string) (*url.URL, error) {
	if s == "" {
		return nil, nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an http:// or https:// proxy URL", s)
	}
	return u, nil
}
