package kclmod

import (
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

func mustPolicy(t *testing.T, o Options) *netPolicy {
	t.Helper()
	p, err := newNetPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func prefixes(t *testing.T, ss ...string) []netip.Prefix {
	t.Helper()
	ps, err := ParseNetworks(ss)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// The default rules refuse the addresses that reach the local host, the link (cloud metadata
// at 169.254.169.254), private networks (where internal services are), many hosts, or any other
// special-purpose range, however they are written.
func TestAddressRules(t *testing.T) {
	def := fixedHost(mustPolicy(t, Options{}))
	refused := []string{"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1", "169.254.169.254",
		"::ffff:169.254.169.254", "fe80::1", "fe80::1%eth0", "0.0.0.0", "0.1.2.3", "::", "224.0.0.1",
		"239.1.2.3", "ff02::1", "ff05::2", "255.255.255.255", "64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1",
		"10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "100.64.0.1", "100.127.1.1", "fd00::1",
		"fc00::1", "::ffff:10.1.2.3", "64:ff9b::a01:203", "2001:db8::1", "192.0.2.2", "198.18.0.1", "240.0.0.1",
		"64:ff9b:1::a01:203", "::ffff:203.0.113.9", "64:ff9b::c000:202"}
	for _, s := range refused {
		if def.addrAllowed(netip.MustParseAddr(s)) {
			t.Errorf("%s allowed by default", s)
		}
	}
	allowed := []string{"8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "64:ff9b::808:808"}
	for _, s := range allowed {
		if !def.addrAllowed(netip.MustParseAddr(s)) {
			t.Errorf("%s refused by default", s)
		}
	}

	p := mustPolicy(t, Options{
		AllowedNetworks: append(prefixes(t, "127.0.0.0/8", "10.9.9.9", "192.168.0.0/16"), netip.MustParsePrefix("::ffff:169.254.1.0/120")),
		DeniedNetworks:  prefixes(t, "10.0.0.0/8"),
	})
	for s, want := range map[string]bool{
		"127.0.0.1":          true,
		"::ffff:127.0.0.1":   true,
		"::1":                false, // 127.0.0.0/8 is not ::1
		"10.1.2.3":           false, // denied
		"10.9.9.9":           true,  // allowed wins over denied
		"169.254.1.7":        true,  // a mapped prefix applies to IPv4 addresses
		"169.254.169.254":    false,
		"192.168.1.1":        true,
		"::ffff:10.1.2.3":    false,
		"64:ff9b::a01:203":   false, // 10.1.2.3 through NAT64
		"64:ff9b::7f00:0001": true,  // judged by the IPv4 address it embeds
	} {
		if got := p.addrAllowed(netip.MustParseAddr(s)); got != want {
			t.Errorf("%s: allowed %v, want %v", s, got, want)
		}
	}
}

// The dialer's check runs on the address being connected to, before connect: it is a pure
// function of that address, tried here without any network.
func TestDialControlRefusesBeforeConnecting(t *testing.T) {
	p := mustPolicy(t, Options{AllowedNetworks: prefixes(t, "127.0.0.1")})
	for addr, ok := range map[string]bool{
		"169.254.169.254:80": false, "[::1]:443": false, "0.0.0.0:5000": false, "127.0.0.2:80": false,
		"[::ffff:127.0.0.1]:80": true, "127.0.0.1:80": true, "10.0.0.1:443": false, "8.8.8.8:443": true, "not-an-ip:80": false,
	} {
		err := p.control("tcp", addr, nil)
		var nae *notAllowedError
		if ok != (err == nil) || (err != nil && !errors.As(err, &nae)) {
			t.Errorf("%s: %v", addr, err)
		}
	}
}

func TestAllowedHostPatterns(t *testing.T) {
	p := mustPolicy(t, Options{AllowedHosts: []string{"GHCR.io", "*.example.com", "registry.local:5000", "[::1]:8443", " "}})
	for host, want := range map[string]bool{
		"ghcr.io":                 true,
		"ghcr.io:443":             true, // no port in the pattern: any port
		"GHCR.IO":                 true,
		"evil-ghcr.io":            false,
		"ghcr.io.evil.com":        false,
		"a.example.com":           true,
		"a.b.example.com:8443":    true,
		"example.com":             false,
		"registry.local:5000":     true,
		"registry.local":          false,
		"registry.local:5001":     false,
		"[::1]:8443":              true,
		"[::1]:8444":              false,
		"169.254.169.254":         false,
		"pkg-containers.ghcr.io2": false,
	} {
		if got := p.hostAllowed(host); got != want {
			t.Errorf("%s: allowed %v, want %v", host, got, want)
		}
	}
	if !mustPolicy(t, Options{}).hostAllowed("anything.example:1") {
		t.Error("no AllowedHosts must allow any host")
	}
	if _, err := New(Options{CacheDir: t.TempDir(), AllowedHosts: []string{"[bad"}}); err == nil || !strings.Contains(err.Error(), "[bad") {
		t.Errorf("a bad pattern must be refused by New, got %v", err)
	}
}

func TestParseNetworks(t *testing.T) {
	ps, err := ParseNetworks([]string{"10.0.0.0/8", " 127.0.0.1 ", "", "fd00::/8", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "127.0.0.1/32", "fd00::/8", "::1/128"}
	if len(ps) != len(want) {
		t.Fatalf("%v", ps)
	}
	for i := range want {
		if ps[i].String() != want[i] {
			t.Errorf("%d: %s, want %s", i, ps[i], want[i])
		}
	}
	if _, err := ParseNetworks([]string{"10.0.0.0/33"}); err == nil {
		t.Error("invalid prefix accepted")
	}
	if _, err := ParseNetworks([]string{"example.com"}); err == nil {
		t.Error("host name accepted")
	}
}

// Credentials go over https to their exact host and port (443 when not written on either side);
// plain http only carries credentials marked insecure, again to their exact host and port.
func TestGitAuthForHTTPSOnlyExactHostPort(t *testing.T) {
	tok := func(s string) GitAuth { return GitAuth{BearerToken: s} }
	insecure := func(s string) GitAuth { return GitAuth{BearerToken: s, Insecure: true} }
	creds := Credentials{Git: map[string]GitAuth{
		"git.example.com":      tok("plain"),
		"git.example.com:8443": tok("port8443"),
		"legacy.example.com":   insecure("legacy"),
		"dev.example.com:8080": insecure("dev8080"),
		"[::1]:9443":           tok("v6"),
		"https://bad.example":  tok("not-a-host"),
	}}
	for raw, want := range map[string]string{
		"https://git.example.com/r.git":        "plain",
		"https://GIT.example.com:443/r.git":    "plain",
		"https://git.example.com:8443/r.git":   "port8443",
		"https://git.example.com:9999/r.git":   "",
		"http://git.example.com/r.git":         "", // not marked insecure
		"http://git.example.com:443/r.git":     "",
		"https://sub.git.example.com/r.git":    "",
		"http://legacy.example.com/r.git":      "legacy", // port 80 on both sides
		"https://legacy.example.com/r.git":     "legacy",
		"http://legacy.example.com:8080/r.git": "",
		"http://dev.example.com:8080/r.git":    "dev8080",
		"http://dev.example.com/r.git":         "",
		"https://[::1]:9443/r.git":             "v6",
		"https://[::1]/r.git":                  "",
		"https://bad.example/r.git":            "",
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		m, ok := creds.gitAuthFor(u)
		got := ""
		if ok {
			got = m.(*githttp.TokenAuth).Token
		}
		if got != want {
			t.Errorf("%s: credentials %q, want %q", raw, got, want)
		}
	}
	u, _ := url.Parse("http://git.example.com/r.git")
	if !creds.gitAuthWithheld(u) {
		t.Error("credentials withheld from plain http must be reported")
	}
}

func TestGitAuthFromSecretDataInsecure(t *testing.T) {
	a, ok := GitAuthFromSecretData(map[string][]byte{"bearerToken": []byte("t"), "insecure": []byte("true")})
	if !ok || !a.Insecure {
		t.Fatalf("%+v %v", a, ok)
	}
	a, _ = GitAuthFromSecretData(map[string][]byte{"bearerToken": []byte("t"), "insecure": []byte("no")})
	if a.Insecure {
		t.Fatal("insecure: no")
	}
	if _, ok := GitAuthFromSecretData(map[string][]byte{"insecure": []byte("true")}); ok {
		t.Fatal("insecure alone is not credentials")
	}
}

// Something replacing the go-git transport must not silently remove the network checks.
func TestReplacedGitTransportFailsClosed(t *testing.T) {
	if err := checkGitTransport("https"); err != nil {
		t.Fatal(err)
	}
	client.InstallProtocol("https", githttp.DefaultClient)
	defer client.InstallProtocol("https", gitTransport)
	if err := checkGitTransport("https"); err == nil {
		t.Fatal("a replaced transport must be refused")
	}
}

// The proxy is the option's and nothing else's. net/http reads HTTP(S)_PROXY once per process,
// so an end-to-end check could not see the environment being used: the transport is looked at.
func TestOnlyTheProxyOptionSetsAProxy(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://env-proxy.example:3128")
	t.Setenv("HTTP_PROXY", "http://env-proxy.example:3128")
	req := &http.Request{URL: &url.URL{Scheme: "https", Host: "ghcr.io"}}
	for _, tc := range []struct {
		proxy *url.URL
		want  string
	}{
		{nil, ""},
		{&url.URL{Scheme: "http", Host: "proxy.example:3128"}, "http://proxy.example:3128"},
	} {
		r, err := New(Options{CacheDir: t.TempDir(), Proxy: tc.proxy})
		if err != nil {
			t.Fatal(err)
		}
		if tc.proxy == nil && r.net.tr.Proxy != nil {
			t.Fatal("a proxy function is set without the option (net/http caches the environment: any function is suspect)")
		}
		var got string
		if p := r.net.tr.Proxy; p != nil {
			u, err := p(req)
			if err != nil {
				t.Fatal(err)
			}
			if u != nil {
				got = u.String()
			}
		}
		if got != tc.want {
			t.Errorf("Proxy option %v: requests go through %q, want %q", tc.proxy, got, tc.want)
		}
	}
}
