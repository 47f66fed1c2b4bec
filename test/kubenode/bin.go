package kubenode

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// Bin holds the node's binaries, as `make nodebin` (hack/nodebin.sh) writes them to bin/node.env,
// plus etcd and kube-apiserver from `make testbin` (bin/testbin.env).
type Bin struct {
	Etcd, KubeAPIServer                      string
	KubeControllerManager, KubeScheduler     string
	Kubelet, KubeProxy                       string
	Containerd, ContainerdShim, Ctr, Runc    string
	CoreDNS, CNIBinDir, Iptables             string
	KubeRouter                               string // only its NetworkPolicy firewall runs
	nodeEnvFile, testbinEnvFile, nodeBinPath string
}

// LoadBin reads bin/node.env and bin/testbin.env under the repository root; variables set in
// the environment win. The error names the make target that builds what is missing.
func LoadBin() (*Bin, error) {
	root, err := fluxenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	tb, err := fluxenv.LoadTestBin()
	if err != nil {
		return nil, err
	}
	envFile := filepath.Join(root, "bin", "node.env")
	vals, err := fluxenv.ReadEnvFile(envFile)
	if err != nil {
		return nil, fmt.Errorf("reading %s (run `make nodebin`): %w", envFile, err)
	}
	get := func(k string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return vals[k]
	}
	b := &Bin{
		Etcd: tb.Etcd, KubeAPIServer: tb.KubeAPIServer,
		KubeControllerManager: get("KUBE_CONTROLLER_MANAGER"), KubeScheduler: get("KUBE_SCHEDULER"),
		Kubelet: get("KUBELET"), KubeProxy: get("KUBE_PROXY"),
		Containerd: get("CONTAINERD"), ContainerdShim: get("CONTAINERD_SHIM_RUNC_V2"),
		Ctr: get("CTR"), Runc: get("RUNC"), CoreDNS: get("COREDNS"),
		CNIBinDir: get("CNI_BIN_DIR"), Iptables: get("IPTABLES"), KubeRouter: get("KUBE_ROUTER"),
		nodeEnvFile: envFile, testbinEnvFile: tb.EnvFile,
	}
	return b, b.check()
}

func (b *Bin) check() error {
	for name, p := range map[string]string{
		"etcd": b.Etcd, "kube-apiserver": b.KubeAPIServer, "kube-controller-manager": b.KubeControllerManager,
		"kube-scheduler": b.KubeScheduler, "kubelet": b.Kubelet, "kube-proxy": b.KubeProxy,
		"containerd": b.Containerd, "containerd-shim-runc-v2": b.ContainerdShim, "ctr": b.Ctr,
		"runc": b.Runc, "coredns": b.CoreDNS, "iptables": b.Iptables, "kube-router": b.KubeRouter,
	} {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s: no executable at %q (from %s; run `make nodebin`)", name, p, b.nodeEnvFile)
		}
	}
	// kube-router runs ipset (and iptables) by name, from the node's PATH
	if _, err := lookPath("ipset", b.path()); err != nil {
		return fmt.Errorf("ipset (kube-router's NetworkPolicy firewall) not on %q (run `make nodebin`)", b.path())
	}
	for _, plugin := range []string{"ptp", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat(filepath.Join(b.CNIBinDir, plugin)); err != nil {
			return fmt.Errorf("CNI plugin %s missing in %q (run `make nodebin`)", plugin, b.CNIBinDir)
		}
	}
	return nil
}

// path is the PATH the node's components run with: containerd finds its shim and runc there,
// kube-proxy and kube-router iptables (the same binary: one backend, nf_tables here), kube-router
// ipset.
func (b *Bin) path() string {
	dirs := []string{filepath.Dir(b.ContainerdShim), filepath.Dir(b.Runc), filepath.Dir(b.Iptables),
		"/usr/sbin", "/usr/bin", "/sbin", "/bin"}
	return strings.Join(dirs, ":")
}

// lookPath finds an executable in the directories of path, as the node's components do.
func lookPath(name, path string) (string, error) {
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in %s", name, path)
}
