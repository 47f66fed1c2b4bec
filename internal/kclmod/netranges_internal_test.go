package kclmod

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// fixedHost makes a policy's host addresses these, whatever this machine's are.
func fixedHost(p *netPolicy, addrs ...string) *netPolicy {
	p.hostAddrs = func() ([]netip.Addr, error) {
		out := make([]netip.Addr, 0, len(addrs))
		for _, a := range addrs {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	}
	return p
}

// why is the reason a is refused under p, "" when it is allowed.
func why(p *netPolicy, a string) string {
	d := p.judge(netip.MustParseAddr(a))
	if d == nil {
		return ""
	}
	return d.describe(a, true)
}

// Each special-purpose range, written out here rather than taken from the list: an address
// inside (its last, where one fits), refused for that range; the first address past its boundary,
// allowed or refused for another range; and the inside address admitted once the range is in
// AllowedNetworks. The ranges embedding an IPv4 address use an inside address embedding 8.8.8.8.
var rangeCases = []struct{ prefix, inside, outside string }{
	{"0.0.0.0/8", "0.255.255.255", "1.0.0.0"},
	{"10.0.0.0/8", "10.255.255.255", "11.0.0.0"},
	{"100.64.0.0/10", "100.127.255.255", "100.128.0.0"},
	{"127.0.0.0/8", "127.255.255.255", "128.0.0.0"},
	{"169.254.0.0/16", "169.254.255.255", "169.255.0.0"},
	{"172.16.0.0/12", "172.31.255.255", "172.32.0.0"},
	{"192.0.0.0/24", "192.0.0.255", "192.0.1.0"},
	{"192.0.2.0/24", "192.0.2.255", "192.0.3.0"},
	{"192.31.196.0/24", "192.31.196.255", "192.31.197.0"},
	{"192.52.193.0/24", "192.52.193.255", "192.52.194.0"},
	{"192.88.99.0/24", "192.88.99.255", "192.88.100.0"},
	{"192.168.0.0/16", "192.168.255.255", "192.169.0.0"},
	{"192.175.48.0/24", "192.175.48.255", "192.175.49.0"},
	{"198.18.0.0/15", "198.19.255.255", "198.20.0.0"},
	{"198.51.100.0/24", "198.51.100.255", "198.51.101.0"},
	{"203.0.113.0/24", "203.0.113.255", "203.0.114.0"},
	{"224.0.0.0/4", "239.255.255.255", "223.255.255.255"},
	{"240.0.0.0/4", "255.255.255.254", "239.255.255.255"},
	{"255.255.255.255/32", "255.255.255.255", "255.255.255.254"},
	{"::/128", "::", "::1"},
	{"::1/128", "::1", "::2"},
	{"::/96", "::ffff:ffff", "::1:0:0"},
	{"64:ff9b:1::/48", "64:ff9b:1:808:8:800::", "64:ff9b:2::"},
	{"100::/64", "100::ffff:ffff:ffff:ffff", "100:0:0:1::"},
	{"2001::/23", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", "2001:200::"},
	{"2001::/32", "2001:0:4136:e378:8000:63bf:f7f7:f7f7", "2001:1::"},
	{"2001:2::/48", "2001:2:0:ffff:ffff:ffff:ffff:ffff", "2001:2:1::"},
	{"2001:3::/32", "2001:3:ffff:ffff:ffff:ffff:ffff:ffff", "2001:4::"},
	{"2001:4:112::/48", "2001:4:112:ffff:ffff:ffff:ffff:ffff", "2001:4:113::"},
	{"2001:10::/28", "2001:1f:ffff:ffff:ffff:ffff:ffff:ffff", "2001:20::"},
	{"2001:20::/28", "2001:2f:ffff:ffff:ffff:ffff:ffff:ffff", "2001:30::"},
	{"2001:30::/28", "2001:3f:ffff:ffff:ffff:ffff:ffff:ffff", "2001:40::"},
	{"2001:db8::/32", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::"},
	{"2002::/16", "2002:808:808:ffff:ffff:ffff:ffff:ffff", "2003::"},
	{"2620:4f:8000::/48", "2620:4f:8000:ffff:ffff:ffff:ffff:ffff", "2620:4f:8001::"},
	{"3fff::/20", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "3fff:1000::"},
	{"5f00::/16", "5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "5f01::"},
	{"fc00::/7", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fe00::"},
	{"fe80::/10", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "fec0::"},
	{"fec0::/10", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ff00::"},
	{"ff00::/8", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
	{"::/3", "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2000::"},
	{"4000::/2", "7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
	{"8000::/1", "8000::", "7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"},
}

func TestSpecialRanges(t *testing.T) {
	listed := map[string]bool{}
	for _, r := range specialRanges {
		if !r.translated {
			listed[r.prefix.String()] = true
		}
	}
	def := fixedHost(mustPolicy(t, Options{}))
	for _, c := range rangeCases {
		if !listed[c.prefix] {
			t.Errorf("%s is not in specialRanges", c.prefix)
		}
		delete(listed, c.prefix)
		named := " is in " + c.prefix + " ("
		if got := why(def, c.inside); !strings.Contains(got, named) {
			t.Errorf("%s: want it refused for %s, got %q", c.inside, c.prefix, got)
		}
		if got := why(def, c.outside); strings.Contains(got, named) {
			t.Errorf("%s, outside %s: refused for it: %q", c.outside, c.prefix, got)
		}
		admitting := fixedHost(mustPolicy(t, Options{AllowedNetworks: prefixes(t, c.prefix)}))
		if got := why(admitting, c.inside); got != "" {
			t.Errorf("%s with %s allowed: %q", c.inside, c.prefix, got)
		}
	}
	for p := range listed {
		t.Errorf("%s has no case", p)
	}
	// the neighbours that fall in no range are allowed: the ranges are not wider than listed
	for _, a := range []string{"1.0.0.0", "11.0.0.0", "100.128.0.0", "128.0.0.0", "169.255.0.0", "172.32.0.0", "192.0.1.0",
		"192.0.3.0", "192.31.197.0", "192.52.194.0", "192.88.100.0", "192.169.0.0", "192.175.49.0", "198.20.0.0", "198.51.101.0",
		"203.0.114.0", "223.255.255.255", "2001:200::", "2001:db9::", "2003::", "2620:4f:8001::", "3fff:1000::", "2000::",
		"3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "8.8.8.8", "2606:4700::1111"} {
		if got := why(def, a); got != "" {
			t.Errorf("%s refused: %q", a, got)
		}
	}
}

// Disguises: an address written as another that reaches it (IPv4-mapped, NAT64, 6to4, Teredo)
// is judged as the address reached, even where the disguising range itself is admitted.
func TestDisguisedAddresses(t *testing.T) {
	def := fixedHost(mustPolicy(t, Options{}), "198.51.100.7")
	admitting := fixedHost(mustPolicy(t, Options{AllowedNetworks: prefixes(t, "2002::/16", "2001::/32", "64:ff9b:1:abcd::/96", "64:ff9b::/40")}), "198.51.100.7")
	for _, c := range []struct {
		p       *netPolicy
		addr    string
		refused string // "" for allowed
	}{
		{def, "::ffff:192.0.2.1", "is in 192.0.2.0/24 (documentation, RFC 5737)"},
		{def, "::ffff:8.8.8.8", ""},
		{def, "64:ff9b::c000:201", "reaches 192.0.2.1 (NAT64, RFC 6052), which is in 192.0.2.0/24"},
		{def, "64:ff9b::a9fe:a9fe", "reaches 169.254.169.254 (NAT64, RFC 6052), which is in 169.254.0.0/16"},
		{def, "64:ff9b::c633:6407", "reaches 198.51.100.7 (NAT64, RFC 6052), which is one of this host's own addresses"},
		{def, "64:ff9b::808:808", ""},
		{def, "2002:808:808::1", "is in 2002::/16 (6to4, RFC 3056)"},
		{admitting, "2002:808:808::1", ""},
		{admitting, "2002:c000:201::1", "reaches 192.0.2.1 (6to4, RFC 3056), which is in 192.0.2.0/24"},
		{admitting, "2002:7f00:1::1", "reaches 127.0.0.1 (6to4, RFC 3056), which is in 127.0.0.0/8"},
		{admitting, "2001:0:4136:e378:8000:63bf:3fff:fdfe", "reaches 192.0.2.1 (Teredo, RFC 4380), which is in 192.0.2.0/24"},
		{admitting, "2001:0:4136:e378:8000:63bf:f7f7:f7f7", ""},
		{admitting, "64:ff9b:1:abcd::c000:201", "reaches 192.0.2.1 (local-use IPv4/IPv6 translation, RFC 8215)"},
		{admitting, "64:ff9b:1:abcd::808:808", ""},
		// admitted by a network wider than the local-use prefix: where the IPv4 address sits is unknown
		{admitting, "64:ff9b:1:ab00:0:ffff:ffff:ffff", "64:ff9b:1::/48 (local-use IPv4/IPv6 translation, RFC 8215), under an allowed network"},
		{def, "fe80::1%eth0", "is in fe80::/10 (link-local, RFC 4291)"},
	} {
		got := why(c.p, c.addr)
		if (c.refused == "") != (got == "") || !strings.Contains(got, c.refused) {
			t.Errorf("%s: got %q, want %q", c.addr, got, c.refused)
		}
	}
}

// The host's own addresses are refused whatever range they are in, unless AllowedNetworks
// admits them; when they cannot be read nothing but the admitted is allowed.
func TestHostOwnAddresses(t *testing.T) {
	p := fixedHost(mustPolicy(t, Options{}), "8.8.4.4", "2606:4700::1111", "192.0.2.2", "fe80::1%eth0")
	for a, want := range map[string]string{
		"8.8.4.4":           "8.8.4.4 is one of this host's own addresses",
		"::ffff:8.8.4.4":    "is one of this host's own addresses",
		"2606:4700::1111":   "2606:4700::1111 is one of this host's own addresses",
		"192.0.2.2":         "192.0.2.2 is one of this host's own addresses and in 192.0.2.0/24 (documentation, RFC 5737)",
		"64:ff9b::808:404":  "reaches 8.8.4.4 (NAT64, RFC 6052), which is one of this host's own addresses",
		"fe80::1%eth1":      "is one of this host's own addresses and in fe80::/10",
		"8.8.8.8":           "",
		"2606:4700::1112":   "",
		"64:ff9b::808:808":  "",
		"2606:4700:0::1111": "is one of this host's own addresses",
	} {
		if got := why(p, a); (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%s: got %q, want %q", a, got, want)
		}
	}
	p = fixedHost(mustPolicy(t, Options{AllowedNetworks: prefixes(t, "8.8.4.4", "192.0.2.0/24")}), "8.8.4.4", "192.0.2.2")
	for _, a := range []string{"8.8.4.4", "192.0.2.2"} {
		if got := why(p, a); got != "" {
			t.Errorf("%s admitted: %q", a, got)
		}
	}

	broken := mustPolicy(t, Options{AllowedNetworks: prefixes(t, "127.0.0.1")})
	broken.hostAddrs = func() ([]netip.Addr, error) { return nil, errors.New("netlink: permission denied") }
	if got := why(broken, "8.8.8.8"); !strings.Contains(got, "this host's addresses could not be read") {
		t.Errorf("unreadable host addresses: 8.8.8.8 %q", got)
	}
	if got := why(broken, "127.0.0.1"); got != "" {
		t.Errorf("an admitted address needs no host addresses: %q", got)
	}
}

// A refusal names the address when the tenant wrote it, and only its range when a name
// resolved to it: the addresses of internal names are not told.
func TestRefusalNamesTheRange(t *testing.T) {
	p := fixedHost(mustPolicy(t, Options{DeniedNetworks: prefixes(t, "8.8.0.0/16")}), "192.0.2.2")
	d := func(a string) *denial { return p.judge(netip.MustParseAddr(a)) }
	for _, c := range []struct {
		e    notAllowedError
		want string
	}{
		{notAllowedError{host: "192.0.2.2:5000", address: true, addr: netip.MustParseAddr("192.0.2.2"), why: d("192.0.2.2")},
			"192.0.2.2 is one of this host's own addresses and in 192.0.2.0/24 (documentation, RFC 5737)"},
		{notAllowedError{host: "node.example:5000", address: true, addr: netip.MustParseAddr("192.0.2.2"), why: d("192.0.2.2")},
			"its address is one of this host's own addresses and in 192.0.2.0/24 (documentation, RFC 5737)"},
		{notAllowedError{host: "[::ffff:10.1.2.3]:80", address: true, addr: netip.MustParseAddr("10.1.2.3"), why: d("10.1.2.3")},
			"10.1.2.3 is in 10.0.0.0/8 (private-use, RFC 1918)"},
		{notAllowedError{host: "meta.example", address: true, addr: netip.MustParseAddr("64:ff9b::a9fe:a9fe"), why: d("64:ff9b::a9fe:a9fe")},
			"its address reaches an IPv4 address (NAT64, RFC 6052), which is in 169.254.0.0/16 (link-local, cloud metadata, RFC 3927)"},
		{notAllowedError{host: "8.8.8.8:443", address: true, addr: netip.MustParseAddr("8.8.8.8"), why: d("8.8.8.8")},
			"8.8.8.8 is in 8.8.0.0/16 (a denied network)"},
		{notAllowedError{host: "x:1", address: true}, "its address could not be checked"},
	} {
		if got := c.e.reason(); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.e.host, got, c.want)
		}
	}
}
