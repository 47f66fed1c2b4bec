package kubenode

import (
	"net"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// FreeAddr is NodeIP and a port free inside the node's network namespace now, for a server
// started there later (a Prometheus whose address a KCLArtifact names before it runs).
func (n *Node) FreeAddr() (string, error) {
	ln, err := n.Listen("tcp", NodeIP+":0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// StartPrometheus starts the real Prometheus (bin/prometheus, fluxenv.StartPrometheus) inside the
// node's namespaces, listening on addr (NodeIP and a port, FreeAddr) and scraping jobs every
// second: it reaches Pod and Service addresses, and Pods reach it at NodeIP, as far as the
// controller's network guard allows (--kcl-deps-allowed-networks=10.200.0.1/32). It runs in the
// node's mount namespace too, so that Cleanup stops it after its owner was killed. workDir holds
// its configuration and data, logPath its output; Close stops it.
func (n *Node) StartPrometheus(addr string, jobs []fluxenv.ScrapeJob, workDir, logPath string, logf func(string, ...any)) (*fluxenv.Prometheus, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, err
	}
	return fluxenv.StartPrometheus(fluxenv.PrometheusOptions{
		Jobs:          jobs,
		WorkDir:       workDir,
		LogPath:       logPath,
		Command:       n.enter(),
		ListenAddress: addr,
		HTTPClient:    n.HTTPClient(10 * time.Second),
		Logf:          logf,
	})
}
