package kclmod_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

// servers are a registry holding team/lib:1.0.0 and a Git server holding lib.git at v1.
type servers struct {
	reg   *kclmodtest.Registry
	gs    *kclmodtest.GitServer
	setup int64 // connections made to set them up
}

func startServers(t *testing.T) servers {
	t.Helper()
	s := servers{reg: kclmodtest.StartRegistry(t, "", ""), gs: kclmodtest.StartGitServer(t)}
	lib := kclmodtest.WritePackage(t, t.TempDir(), "lib", "1.0.0", nil, map[string]string{"lib.k": "v = 1\n"})
	push(t, s.reg, "team/lib:1.0.0", lib, kclmodtest.PushOptions{})
	s.gs.CreateRepo("lib", lib)
	s.gs.Tag("lib", "v1")
	s.setup = s.reg.Conns() + s.gs.Conns()
	return s
}

// conns counts the connections the servers accepted since they were set up.
func (s servers) conns() int64 { return s.reg.Conns() + s.gs.Conns() - s.setup }

func ociApp(t *testing.T, host string) string {
	return kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0",
		[]string{fmt.Sprintf(`lib = { oci = "oci://%s/team/lib", tag = "1.0.0" }`, host)}, nil)
}

func gitApp(t *testing.T, rawURL string) string {
	return kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0",
		[]string{fmt.Sprintf(`lib = { git = "%s", tag = "v1" }`, rawURL)}, nil)
}

func port(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

// mustRefuse checks err reports host (as kcl.mod names it) as not allowed, and nothing of what
// a connection attempt or a server would have said.
func mustRefuse(t *testing.T, err error, host string, parts ...string) {
	t.Helper()
	mustContain(t, err, append([]string{"host not allowed: " + host}, parts...)...)
	if !errors.Is(err, kclmod.ErrHostNotAllowed) {
		t.Fatalf("%v does not wrap ErrHostNotAllowed", err)
	}
	for _, leak := range []string{"refused", "timeout", "unreachable", "no route", "dial", "HTTP", "status", "EOF", "reset"} {
		if strings.Contains(err.Error(), leak) {
			t.Fatalf("error %q tells how the connection went (%q)", err, leak)
		}
	}
}

// By default the servers on 127.0.0.1 are out of reach, however kcl.mod names them, and no
// connection is made: the check runs on the resolved address before connecting.
func TestLoopbackRefusedByDefault(t *testing.T) {
	s := startServers(t)
	r := strictResolver(t, kclmod.Options{})
	regPort, gitPort := port(t, s.reg.Server), port(t, s.gs.Server)
	for _, host := range []string{s.reg.Host, "localhost:" + regPort, "[::ffff:127.0.0.1]:" + regPort} {
		app := ociApp(t, host)
		_, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{})
		mustRefuse(t, err, host, `dependency "lib"`, "loopback")
	}
	for _, host := range []string{s.gs.Host(), "localhost:" + gitPort} {
		app := gitApp(t, "http://"+host+"/lib.git")
		_, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{})
		mustRefuse(t, err, host, `dependency "lib"`, "loopback")
	}
	if n := s.conns(); n != 0 {
		t.Fatalf("the servers accepted %d connections", n)
	}
	// the same resolution with loopback allowed works: the refusals were the rules, not the servers
	app := ociApp(t, s.reg.Host)
	if p := pkgByName(t, resolve(t, newResolver(t, kclmod.Options{}), app, kclmod.Credentials{}), "lib"); p.Source != kclmod.SourceOCI {
		t.Fatalf("%+v", p)
	}
}

// Addresses that are never dialed: link-local (cloud metadata), IPv6 loopback, unspecified, and the
// other special-purpose ranges (benchmarking, documentation, reserved, translation, 6to4). The
// error says the host is not allowed, not that a connection failed or timed out.
func TestSpecialAddressesRefusedBeforeConnecting(t *testing.T) {
	s := startServers(t)
	regPort := port(t, s.reg.Server)
	// 127.0.0.1 allowed: 0.0.0.0 (which reaches it) and ::1 stay refused
	r := strictResolver(t, kclmod.Options{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	for _, host := range []string{"169.254.169.254:1", "[::1]:" + regPort, "0.0.0.0:" + regPort, "[::]:" + regPort, "[fe80::1]:1",
		"198.18.0.1:1", "203.0.113.1:1", "240.0.0.1:1", "[2001:db8::1]:1", "[3fff::1]:1", "[64:ff9b:1::a00:1]:1", "[2002:7f00:1::1]:" + regPort} {
		app := ociApp(t, host)
		_, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{})
		mustRefuse(t, err, host)
		app = gitApp(t, "http://"+host+"/lib.git")
		_, err = r.Resolve(ctx(t), app, app, kclmod.Credentials{})
		mustRefuse(t, err, host)
	}
	if n := s.conns(); n != 0 {
		t.Fatalf("the servers accepted %d connections", n)
	}
}

func TestAllowedHosts(t *testing.T) {
	s := startServers(t)
	refusing := newResolver(t, kclmod.Options{AllowedHosts: []string{"ghcr.io", "127.0.0.1:1", "*.example.com"}})
	for _, app := range []string{ociApp(t, s.reg.Host), gitApp(t, s.gs.URL("lib"))} {
		_, err := refusing.Resolve(ctx(t), app, app, kclmod.Credentials{})
		mustRefuse(t, err, "127.0.0.1:", "is not one of the allowed hosts")
	}
	if n := s.conns(); n != 0 {
		t.Fatalf("the servers accepted %d connections", n)
	}
	for _, allowed := range [][]string{{"127.0.0.*"}, {s.reg.Host, s.gs.Host()}} {
		r := newResolver(t, kclmod.Options{AllowedHosts: allowed})
		res := resolve(t, r, ociApp(t, s.reg.Host), kclmod.Credentials{})
		if p := pkgByName(t, res, "lib"); p.Source != kclmod.SourceOCI {
			t.Fatalf("%v: %+v", allowed, p)
		}
		res = resolve(t, r, gitApp(t, s.gs.URL("lib")), kclmod.Credentials{})
		if p := pkgByName(t, res, "lib"); p.Source != kclmod.SourceGit {
			t.Fatalf("%v: %+v", allowed, p)
		}
	}
}

// redirector serves on 127.0.0.1: requests redirect maps to a URL are redirected there (307),
// the others are proxied to upstream.
func redirector(t *testing.T, upstream string, redirect func(*http.Request) string) *httptest.Server {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if to := redirect(r); to != "" {
			http.Redirect(w, r, to, http.StatusTemporaryRedirect)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// A registry on an allowed host redirecting blob downloads to a host, or an address, that is not
// allowed: the blob is not fetched, and the error names both hosts.
func TestOCIRedirectsAreChecked(t *testing.T) {
	s := startServers(t)
	regPort := port(t, s.reg.Server)
	for _, tc := range []struct {
		name, to string
		opts     kclmod.Options
		want     string
	}{
		{"host", "localhost:" + regPort, kclmod.Options{AllowedHosts: []string{"127.0.0.1"}}, "redirected to localhost:" + regPort},
		{"address", "127.0.0.2:" + regPort, kclmod.Options{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, "redirected to 127.0.0.2:" + regPort + ", which is not allowed: 127.0.0.2 is in 127.0.0.0/8 (loopback, RFC 1122)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			front := redirector(t, s.reg.Server.URL, func(r *http.Request) string {
				if strings.Contains(r.URL.Path, "/blobs/") {
					return "http://" + tc.to + r.URL.RequestURI()
				}
				return ""
			})
			manifests, blobs := s.reg.ManifestGets(), s.reg.BlobGets()
			frontHost := strings.TrimPrefix(front.URL, "http://")
			app := ociApp(t, frontHost)
			_, err := newResolver(t, tc.opts).Resolve(ctx(t), app, app, kclmod.Credentials{})
			mustRefuse(t, err, frontHost, tc.want)
			if s.reg.ManifestGets() == manifests || s.reg.BlobGets() != blobs {
				t.Fatalf("want the manifest fetched through the front and no blob: manifests %d->%d blobs %d->%d",
					manifests, s.reg.ManifestGets(), blobs, s.reg.BlobGets())
			}
		})
	}
}

// The same for a Git server redirecting its discovery request.
func TestGitRedirectsAreChecked(t *testing.T) {
	s := startServers(t)
	gitPort := port(t, s.gs.Server)
	for _, tc := range []struct {
		name, to string
		opts     kclmod.Options
	}{
		{"host", "localhost:" + gitPort, kclmod.Options{AllowedHosts: []string{"127.0.0.1"}}},
		{"address", "127.0.0.2:" + gitPort, kclmod.Options{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			front := redirector(t, s.gs.Server.URL, func(r *http.Request) string {
				return "http://" + tc.to + r.URL.RequestURI()
			})
			frontHost := strings.TrimPrefix(front.URL, "http://")
			app := gitApp(t, front.URL+"/lib.git")
			before := s.gs.Conns()
			_, err := newResolver(t, tc.opts).Resolve(ctx(t), app, app, kclmod.Credentials{})
			mustRefuse(t, err, frontHost, "redirected to "+tc.to)
			if s.gs.Conns() != before {
				t.Fatal("the redirect target was connected to")
			}
		})
	}
}

// A redirect to another port of the same host does not carry the credentials (net/http would
// send them on: same host name).
func TestGitRedirectDropsCredentials(t *testing.T) {
	gs := kclmodtest.StartGitServer(t)
	gs.CreateRepo("priv", kclmodtest.WritePackage(t, t.TempDir(), "priv", "0.1.0", nil, map[string]string{"priv.k": "x = 1\n"}))
	gs.Tag("priv", "v1")
	gs.Token = "tok-redirect-secret"
	front := redirector(t, gs.Server.URL, func(r *http.Request) string { return gs.Server.URL + r.URL.RequestURI() })
	frontHost := strings.TrimPrefix(front.URL, "http://")
	r := newResolver(t, kclmod.Options{})

	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{fmt.Sprintf(`priv = { git = "%s/priv.git", tag = "v1" }`, front.URL)}, nil)
	_, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{Git: map[string]kclmod.GitAuth{frontHost: {BearerToken: gs.Token, Insecure: true}}})
	mustContain(t, err, `dependency "priv"`)
	mustNotContain(t, err, gs.Token)
	if gs.Conns() == 0 || gs.AuthorizationHeaders() != 0 {
		t.Fatalf("want the redirect followed without the credentials: %d connections, %d Authorization headers", gs.Conns(), gs.AuthorizationHeaders())
	}
	// the credentials themselves are good
	direct := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{fmt.Sprintf(`priv = { git = "%s", tag = "v1" }`, gs.URL("priv"))}, nil)
	resolve(t, r, direct, kclmod.Credentials{Git: map[string]kclmod.GitAuth{gs.Host(): {BearerToken: gs.Token, Insecure: true}}})
	if gs.AuthorizationHeaders() == 0 {
		t.Fatal("no credentials sent to their own host")
	}
}

// An https Git server redirecting to plain http is not followed: the credentials for the https
// host, which it did receive, would go over the network in clear text.
func TestGitHTTPSDowngradeRefused(t *testing.T) {
	gs := kclmodtest.StartGitServer(t)
	gs.CreateRepo("lib", kclmodtest.WritePackage(t, t.TempDir(), "lib", "0.1.0", nil, nil))
	gs.Tag("lib", "v1")
	var authorized atomic.Int64
	front := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer tok-https" {
			authorized.Add(1)
		}
		http.Redirect(w, r, gs.Server.URL+r.URL.RequestURI(), http.StatusFound)
	}))
	t.Cleanup(front.Close)
	frontHost := strings.TrimPrefix(front.URL, "https://")
	// the test server's certificate is trusted through the given transport
	r := newResolver(t, kclmod.Options{Transport: front.Client().Transport})
	app := gitApp(t, front.URL+"/lib.git")
	before := gs.Conns()
	_, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{Git: map[string]kclmod.GitAuth{frontHost: {BearerToken: "tok-https"}}})
	mustContain(t, err, `dependency "lib"`, "redirect from https to http refused")
	if authorized.Load() == 0 {
		t.Fatal("the credentials for the https host were not sent to it")
	}
	if gs.Conns() != before || gs.AuthorizationHeaders() != 0 {
		t.Fatalf("the plain http target was reached: %d connections, %d Authorization headers", gs.Conns()-before, gs.AuthorizationHeaders())
	}
}

// Transport: an *http.Transport is used with the checks; anything else is refused, since its
// connections could not be checked.
func TestTransportOption(t *testing.T) {
	s := startServers(t)
	_, err := kclmod.New(kclmod.Options{CacheDir: t.TempDir(), Transport: roundTripperFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("x") })})
	mustContain(t, err, "Transport must be an *http.Transport")

	tr := &http.Transport{}
	app := ociApp(t, s.reg.Host)
	_, err = strictResolver(t, kclmod.Options{Transport: tr}).Resolve(ctx(t), app, app, kclmod.Credentials{})
	mustRefuse(t, err, s.reg.Host)
	if s.conns() != 0 {
		t.Fatal("connected through the given transport")
	}
	res := resolve(t, newResolver(t, kclmod.Options{Transport: tr}), app, kclmod.Credentials{})
	if p := pkgByName(t, res, "lib"); p.Source != kclmod.SourceOCI || !strings.HasPrefix(p.Path, "/") || filepath.Base(p.Path) != "pkg" {
		t.Fatalf("%+v", p)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A cluster that reaches registries only through a proxy opts in with Options.Proxy: requests go
// to the proxy (the registry's name need not resolve here), the host allow-list still applies to
// the registry asked for, and the proxy's own address passes the address checks like any other.
func TestProxyWhenOptedIn(t *testing.T) {
	s := startServers(t)
	var through atomic.Int64
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		through.Add(1)
		r.Out.URL.Scheme, r.Out.URL.Host = "http", s.reg.Host // registry.invalid only exists behind the proxy
	}})
	t.Cleanup(proxy.Close)
	proxyURL, _ := url.Parse(proxy.URL)
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	const behind = "registry.invalid:5000"
	app := ociApp(t, behind)

	r := strictResolver(t, kclmod.Options{Proxy: proxyURL, AllowedNetworks: loopback, InsecureRegistries: []string{behind}})
	res, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{})
	if err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	res.Release()
	if through.Load() == 0 {
		t.Fatal("the proxy was not used")
	}

	// without the proxy the name does not resolve: the proxy is opt-in, HTTPS_PROXY is not read
	t.Setenv("HTTP_PROXY", proxy.URL)
	r = strictResolver(t, kclmod.Options{AllowedNetworks: loopback, InsecureRegistries: []string{behind}})
	if _, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{}); err == nil {
		t.Fatal("HTTP_PROXY was used without Options.Proxy")
	}

	// the allow-list is about the registry asked for, proxy or not
	r = strictResolver(t, kclmod.Options{Proxy: proxyURL, AllowedNetworks: loopback, InsecureRegistries: []string{behind},
		AllowedHosts: []string{"ghcr.io"}})
	_, err = r.Resolve(ctx(t), app, app, kclmod.Credentials{})
	mustRefuse(t, err, behind)

	// the proxy's address is checked: loopback is refused by default
	r = strictResolver(t, kclmod.Options{Proxy: proxyURL, InsecureRegistries: []string{behind}})
	if _, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{}); !errors.Is(err, kclmod.ErrHostNotAllowed) {
		t.Fatalf("a proxy on loopback was used: %v", err)
	}
}
