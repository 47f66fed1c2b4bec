package kubenode

import (
	"context"
	"net"
	"net/http"
	"time"
)

// Resolver resolves names with the node's CoreDNS, as a Pod does: Service names
// (<svc>.<ns>.svc.cluster.local) and nothing outside the cluster.
func (n *Node) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return n.DialContext(ctx, network, net.JoinHostPort(NodeIP, "53"))
	}}
}

// HTTPClient reaches Services and Pods by name or address from inside the node's network, the
// way a Pod would (without a proxy).
func (n *Node) HTTPClient(timeout time.Duration) *http.Client {
	resolver := n.Resolver()
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if net.ParseIP(host) == nil {
			ips, err := resolver.LookupIPAddr(ctx, host)
			if err != nil {
				return nil, err
			}
			host = ips[0].IP.String()
		}
		return n.DialContext(ctx, network, net.JoinHostPort(host, port))
	}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: dial, Proxy: nil,
		DisableKeepAlives: true}}
}
