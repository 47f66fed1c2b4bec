package kclmod_test

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
)

// hostAddress is an address of one of this machine's interfaces that is neither loopback nor
// link-local: where a node's public address would be.
func hostAddress(t *testing.T) netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var v6 netip.Addr
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		switch {
		case ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsMulticast() || ip.IsUnspecified():
		case ip.Is4():
			return ip
		case !v6.IsValid():
			v6 = ip
		}
	}
	if !v6.IsValid() {
		t.Skip("this machine has no address but loopback and link-local: no host address to attack")
	}
	return v6
}

// countingServer listens on addr (all of its answers 404) and counts the connections it accepts.
func countingServer(t *testing.T, addr netip.Addr) (host string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		t.Fatalf("listening on this host's address %s: %v", addr, err)
	}
	accepted = &atomic.Int64{}
	srv := &http.Server{Handler: http.NotFoundHandler(), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			accepted.Add(1)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), accepted
}

// Issue 45, finding 7: a dependency at the machine's own address (192.0.2.2 on the dev machine,
// not loopback nor private) reached a service listening on all addresses. With loopback allowed
// as in development and tests, or with the default rules, no connection is made and the error
// says the address is this host's; naming the address in AllowedNetworks admits it.
func TestHostOwnAddressRefused(t *testing.T) {
	addr := hostAddress(t)
	host, accepted := countingServer(t, addr)
	for name, r := range map[string]*kclmod.Resolver{
		"default":          strictResolver(t, kclmod.Options{}),
		"loopback allowed": newResolver(t, kclmod.Options{}),
	} {
		for _, app := range []string{ociApp(t, host), gitApp(t, "http://"+host+"/lib.git")} {
			_, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{})
			mustRefuse(t, err, host, addr.String()+" is one of this host's own addresses")
			t.Logf("%s: %v", name, err)
			if n := accepted.Load(); n != 0 {
				t.Fatalf("%s: the service on this host's address %s accepted %d connections", name, addr, n)
			}
		}
	}

	r := strictResolver(t, kclmod.Options{AllowedNetworks: []netip.Prefix{netip.PrefixFrom(addr, addr.BitLen())}})
	app := ociApp(t, host)
	_, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{})
	if err == nil || errors.Is(err, kclmod.ErrHostNotAllowed) {
		t.Fatalf("with %s allowed, want the fetch to reach the server (which answers 404): %v", addr, err)
	}
	if accepted.Load() == 0 {
		t.Fatalf("with %s allowed, the server was not connected to", addr)
	}
}
