package kubenode

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The node's addresses. They exist only inside the node's network namespace.
const (
	NodeName       = "kcl-node"
	NodeIP         = "10.200.0.1" // on the namespace's lo: API server, kubelet, CoreDNS
	PodCIDR        = "10.244.0.0/24"
	ServiceCIDR    = "10.96.0.0/16"
	APIServiceIP   = "10.96.0.1" // the kubernetes Service
	ClusterDomain  = "cluster.local"
	apiServerPort  = 6443
	PauseImage     = "registry.k8s.io/pause:3.10"
	corednsReady   = "127.0.0.1:8181"
	kubeletHealthz = "127.0.0.1:10248"
	proxyHealthz   = "127.0.0.1:10256"
	routerHealthz  = "127.0.0.1:20244" // kube-router's --health-port (its default) listens on every address
	// a registry that answers nothing: every pull the node would make from outside goes here
	noRegistry = "http://127.0.0.1:1"
)

// writeConfigs writes every component's configuration into the data directory.
func (n *Node) writeConfigs() error {
	files := map[string]string{
		"containerd/config.toml":               n.containerdConfig(),
		"containerd/hosts/_default/hosts.toml": fmt.Sprintf("server = %q\n", noRegistry),
		"cni/net.d/10-kcl-node.conflist":       n.cniConfig(),
		"kubelet/config.yaml":                  n.kubeletConfig(),
		"kubelet/resolv.conf":                  "nameserver " + NodeIP + "\n",
		"kube-proxy/config.yaml":               n.proxyConfig(),
		"coredns/Corefile":                     n.corefile(),
	}
	for name, content := range files {
		p := filepath.Join(n.DataDir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) data(parts ...string) string {
	return filepath.Join(append([]string{n.DataDir}, parts...)...)
}

// containerdConfig: CRI with runc under cgroupfs, overlayfs, the locally imported pause image,
// CNI from our directory, and oom_score_adj left alone (the machine denies lowering it).
func (n *Node) containerdConfig() string {
	return strings.NewReplacer(
		"ROOT", n.data("containerd", "root"),
		"STATE", filepath.Join(n.RunDir, "containerd"),
		"SOCKET", n.ContainerdSocket(),
		"PAUSE", PauseImage,
		"HOSTS", n.data("containerd", "hosts"),
		"RUNC", n.bin.Runc,
		"CNIBIN", n.bin.CNIBinDir,
		"CNICONF", n.data("cni", "net.d"),
	).Replace(`version = 3
root = 'ROOT'
state = 'STATE'

[grpc]
  address = 'SOCKET'

[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'PAUSE'
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = 'HOSTS'
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    # Pod network namespaces are pinned under the node's run directory, not the host's
    # /var/run/netns, so that teardown removes them with it
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = 'RUNC'
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['CNIBIN']
      conf_dir = 'CNICONF'
`)
}

// cniConfig: point-to-point links instead of a bridge, so that every Pod-to-Service packet is
// routed through the node's namespace, where kube-proxy's rules see both directions (a bridge
// would need br_netfilter for replies between Pods).
func (n *Node) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "kcl-node",
  "plugins": [
    {"type": "ptp", "ipMasq": false, "mtu": 1500,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, n.data("cni", "ipam"), PodCIDR)
}

// kubeletConfig follows kind's node: cgroup v1 through cgroupfs under our own root, no eviction
// by disk usage, no swap check, and kubelet's own resolv.conf (the machine's resolver answers
// nothing).
func (n *Node) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://%[2]s
cgroupDriver: cgroupfs
cgroupRoot: %[3]s
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
resolvConf: %[4]s
clusterDNS: [%[1]s]
clusterDomain: %[5]s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[6]s}
authorization:
  mode: Webhook
evictionHard:
  nodefs.available: "0%%"
  nodefs.inodesFree: "0%%"
  imagefs.available: "0%%"
imageGCHighThresholdPercent: 100
serializeImagePulls: false
staticPodPath: ""
`, NodeIP, n.ContainerdSocket(), n.cgroupRoot(), n.data("kubelet", "resolv.conf"), ClusterDomain,
		n.pki.path("ca.crt"))
}

// proxyConfig: iptables mode; conntrack tunables are not writable from a non-initial network
// namespace, so kube-proxy must leave them alone.
func (n *Node) proxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: %s
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: %s
metricsBindAddress: 127.0.0.1:10249
clientConnection:
  kubeconfig: %s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, PodCIDR, NodeName, NodeIP, proxyHealthz, n.data("kube-proxy", "kubeconfig"))
}

// kubeRouterArgs: only the NetworkPolicy firewall (kube-proxy serves Services, ptp routes Pods),
// for this node's Pods (those whose hostIP is the node's InternalIP, NodeIP), with the Service
// range whose addresses it lets through to kube-proxy's rules.
func (n *Node) kubeRouterArgs() []string {
	_, port, _ := strings.Cut(routerHealthz, ":")
	return []string{"--kubeconfig", n.data("kube-router", "kubeconfig"), "--hostname-override", NodeName,
		"--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false",
		"--service-cluster-ip-range", ServiceCIDR, "--health-port", port, "--metrics-port", "0", "--v", "1"}
}

// corefile: cluster names only. There is no forward plugin: nothing leaves the machine.
func (n *Node) corefile() string {
	return fmt.Sprintf(`.:53 {
    bind %s
    errors
    ready %s
    kubernetes %s in-addr.arpa ip6.arpa {
        kubeconfig %s kcl-node
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
`, NodeIP, corednsReady, ClusterDomain, n.data("coredns", "kubeconfig"))
}
