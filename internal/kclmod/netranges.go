package kclmod

import (
	"cmp"
	"net/netip"
	"slices"
)

// specialRange is a range dependencies are not fetched from unless Options.AllowedNetworks
// admits it.
type specialRange struct {
	prefix netip.Prefix
	why    string // what the range is, and where it is defined
	// translated ranges are not refused for themselves: the IPv4 address they embed is judged
	translated bool
}

func (r specialRange) String() string { return r.prefix.String() + " (" + r.why + ")" }

func sr(prefix, why string) specialRange {
	return specialRange{prefix: netip.MustParsePrefix(prefix), why: why}
}

// specialRanges are IANA's IPv4 and IPv6 Special-Purpose Address Registries (RFC 6890, as of
// 2025), multicast, and every IPv6 address outside 2000::/3 (global unicast, RFC 4291: nothing
// else is routed on the internet). A dependency is a package on a public server: none of these is
// where one lives, several reach this host, its link or its network (loopback, "this network",
// link-local cloud metadata, private ranges), and the others are documentation, benchmarking or
// protocol addresses an internal network may route anywhere. The most specific range comes
// first, so that a refusal names it.
//
// One entry is deliberately not refused: 64:ff9b::/96, the well-known NAT64 prefix (globally
// reachable in the registry), through which IPv6-only clusters reach IPv4 registries. Its
// addresses are judged by the IPv4 address they embed, with every rule.
var specialRanges = mostSpecificFirst([]specialRange{
	// IPv4 (multicast is in its own registry, RFC 5771)
	sr("0.0.0.0/8", `"this network", RFC 791`),
	sr("10.0.0.0/8", "private-use, RFC 1918"),
	sr("100.64.0.0/10", "shared address space, carrier-grade NAT, RFC 6598"),
	sr("127.0.0.0/8", "loopback, RFC 1122"),
	sr("169.254.0.0/16", "link-local, cloud metadata, RFC 3927"),
	sr("172.16.0.0/12", "private-use, RFC 1918"),
	sr("192.0.0.0/24", "IETF protocol assignments, RFC 6890"),
	sr("192.0.2.0/24", "documentation, RFC 5737"),
	sr("192.31.196.0/24", "AS112-v4, RFC 7535"),
	sr("192.52.193.0/24", "AMT, RFC 7450"),
	sr("192.88.99.0/24", "deprecated 6to4 relay anycast, RFC 7526"),
	sr("192.168.0.0/16", "private-use, RFC 1918"),
	sr("192.175.48.0/24", "direct delegation AS112 service, RFC 7534"),
	sr("198.18.0.0/15", "benchmarking, RFC 2544"),
	sr("198.51.100.0/24", "documentation, RFC 5737"),
	sr("203.0.113.0/24", "documentation, RFC 5737"),
	sr("224.0.0.0/4", "multicast, RFC 5771"),
	sr("240.0.0.0/4", "reserved, RFC 1112"),
	sr("255.255.255.255/32", "limited broadcast, RFC 919"),

	// IPv6
	sr("::/128", "unspecified, RFC 4291"),
	sr("::1/128", "loopback, RFC 4291"),
	sr("::/96", "IPv4-compatible, deprecated, RFC 4291"),
	// ::ffff:0:0/96 (IPv4-mapped) is judged as the IPv4 address it maps
	{prefix: netip.MustParsePrefix("64:ff9b::/96"), why: "NAT64, RFC 6052", translated: true},
	sr("64:ff9b:1::/48", "local-use IPv4/IPv6 translation, RFC 8215"),
	sr("100::/64", "discard-only, RFC 6666"),
	sr("2001::/23", "IETF protocol assignments, RFC 2928"),
	sr("2001::/32", "Teredo, RFC 4380"),
	sr("2001:2::/48", "benchmarking, RFC 5180"),
	sr("2001:3::/32", "AMT, RFC 7450"),
	sr("2001:4:112::/48", "AS112-v6, RFC 7535"),
	sr("2001:10::/28", "deprecated ORCHID, RFC 4843"),
	sr("2001:20::/28", "ORCHIDv2, RFC 7343"),
	sr("2001:30::/28", "drone remote ID entity tags, RFC 9374"),
	sr("2001:db8::/32", "documentation, RFC 3849"),
	sr("2002::/16", "6to4, RFC 3056"),
	sr("2620:4f:8000::/48", "direct delegation AS112 service, RFC 7534"),
	sr("3fff::/20", "documentation, RFC 9637"),
	sr("5f00::/16", "SRv6 segment identifiers, RFC 9602"),
	sr("fc00::/7", "unique-local, RFC 4193"),
	sr("fe80::/10", "link-local, RFC 4291"),
	sr("fec0::/10", "site-local, deprecated, RFC 3879"),
	sr("ff00::/8", "multicast, RFC 4291"),
	sr("::/3", "outside IPv6 global unicast 2000::/3, RFC 4291"),
	sr("4000::/2", "outside IPv6 global unicast 2000::/3, RFC 4291"),
	sr("8000::/1", "outside IPv6 global unicast 2000::/3, RFC 4291"),
})

func mostSpecificFirst(rs []specialRange) []specialRange {
	slices.SortStableFunc(rs, func(a, b specialRange) int { return cmp.Compare(b.prefix.Bits(), a.prefix.Bits()) })
	return rs
}

// specialRangeOf returns the most specific special range holding a (an unmapped address).
func specialRangeOf(a netip.Addr) (specialRange, bool) {
	for _, r := range specialRanges {
		if r.prefix.Contains(a) {
			return r, true
		}
	}
	return specialRange{}, false
}

var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	teredo     = netip.MustParsePrefix("2001::/32")
	sixToFour  = netip.MustParsePrefix("2002::/16")
	localNAT64 = netip.MustParsePrefix("64:ff9b:1::/48")
)

// embeddedIPv4 returns the IPv4 address an IPv6 address reaches through a translator or tunnel:
// NAT64 (the well-known prefix, and the local-use one laid out as the allowed network admitting
// it, RFC 6052), 6to4 and Teredo's client. ok is false for other addresses; valid is false when
// the layout is unknown (a local-use NAT64 address admitted by a network whose length is none
// of RFC 6052's).
func embeddedIPv4(a netip.Addr, admittedBy netip.Prefix) (v4 netip.Addr, ok, valid bool) {
	if !a.Is6() {
		return netip.Addr{}, false, false
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return rfc6052(b, 96), true, true
	case localNAT64.Contains(a):
		switch bits := admittedBy.Bits(); bits {
		case 48, 56, 64, 96:
			return rfc6052(b, bits), true, true
		}
		return netip.Addr{}, true, false
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true, true
	case teredo.Contains(a):
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true, true
	}
	return netip.Addr{}, false, false
}

// rfc6052 reads the IPv4 address of a translated address under a prefix of the given length
// (32 to 96), skipping bits 64 to 71, which RFC 6052 keeps zero.
func rfc6052(b [16]byte, bits int) netip.Addr {
	var v4 [4]byte
	n := 0
	for i := bits / 8; n < 4 && i < 16; i++ {
		if i == 8 {
			continue
		}
		v4[n] = b[i]
		n++
	}
	return netip.AddrFrom4(v4)
}
