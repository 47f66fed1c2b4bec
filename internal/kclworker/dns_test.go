package kclworker_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
)

// dnsListener answers every query on 127.0.0.1:53 with REFUSED and records the names asked. A
// confined worker cannot read /etc/resolv.conf, so its resolver falls back to this address: the
// listener sees what net.fqdn would carry out of the cluster by DNS.
type dnsListener struct {
	conn  *net.UDPConn
	names chan string
}

func listenDNS(t *testing.T) *dnsListener {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53})
	if err != nil {
		t.Skipf("binding 127.0.0.1:53 needs root: %v", err)
	}
	l := &dnsListener{conn: conn, names: make(chan string, 64)}
	t.Cleanup(func() { conn.Close() })
	go l.serve()
	return l
}

func (l *dnsListener) serve() {
	buf := make([]byte, 512)
	for {
		n, addr, err := l.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if n < 12 {
			continue
		}
		l.names <- string(buf[12:n])
		resp := append([]byte(nil), buf[:n]...)
		resp[2] |= 0x80 // a response
		resp[3] = 0x05  // REFUSED
		_, _ = l.conn.WriteToUDP(resp, addr)
	}
}

// asked reports whether a query containing label arrived; a query is sent during the render, so
// it is in the socket by the time the render returns.
func (l *dnsListener) asked(label string) bool {
	deadline := time.After(500 * time.Millisecond)
	for {
		select {
		case n := <-l.names:
			if strings.Contains(n, label) {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

func TestSandboxNoDNS(t *testing.T) {
	dns := listenDNS(t)
	tn := newTenant(t, "tenant-a")
	prog := func(label string) string { return "import net\nx = net.fqdn(\"" + label + ".example\")\n" }
	// Without seccomp a confined worker does send the query: the attack works.
	open := newPool(t, kclworker.WithoutSeccomp(kclworker.Options{Size: 1, Sandbox: true}))
	if _, err := tn.run(t, open, prog("exfil-one")); err != nil {
		t.Fatal(err)
	}
	if !dns.asked("exfil-one") {
		t.Fatal("without seccomp the query should have reached the listener")
	}
	out, err := tn.run(t, sandboxed(t), prog("exfil-two"))
	if dns.asked("exfil-two") {
		t.Fatalf("a confined worker sent a DNS query (%v %q)", err, out)
	}
}
