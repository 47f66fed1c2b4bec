// Package kubenode starts and stops a real single-node Kubernetes cluster on this machine, for the
// test suite (test/node) and the demo (test/cmd/node): etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, containerd with runc, kubelet, kube-proxy, CoreDNS and
// kube-router's NetworkPolicy firewall, all built from source by `make testbin nodebin`.
//
// The node runs in a network namespace and a mount namespace of its own (see namespaces.go), so
// Pod and Service addresses, iptables rules and the node's mounts exist only there. The caller
// reaches the API server through a forwarder on 127.0.0.1 (Node.Kubeconfig) or dials inside the
// namespace with Node.DialContext. Every component is a child of the calling process (Pdeathsig),
// and Stop, or the next Start after a crash, removes every process, mount, cgroup, namespace and
// kernel tunable the node left (Cleanup).
package kubenode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// Options configure Start. The zero value is usable.
type Options struct {
	// Name tells nodes apart on one machine (namespaces, cgroups, /run/kcl-<Name>). Default "node".
	Name string
	// DataDir holds the node's state: certificates, etcd, containerd's images, kubelet, logs.
	// Made anew at each Start. Default <repo>/bin/node-<Name>.
	DataDir string
	// StartTimeout bounds each component's start. Default 3 minutes.
	StartTimeout time.Duration
	// Bin overrides the binaries of LoadBin.
	Bin *Bin
	// Logf receives progress messages.
	Logf func(format string, args ...any)
}

// Node is a running node.
type Node struct {
	Config         *rest.Config // admin, dialling inside the node's namespace
	Client         client.Client
	KubeconfigPath string // admin kubeconfig for kubectl on this machine, through the forwarder
	DataDir        string
	RunDir         string // /run/kcl-<Name>: containerd's state and socket, the namespace pin
	LogDir         string
	Started        time.Duration // how long Start took

	opts      Options
	bin       *Bin
	pki       *pki
	procs     []*fluxenv.Process
	forwarder net.Listener
	stopOnce  sync.Once
	stopErr   error
}

// Start cleans up whatever an earlier node of the same name left, then starts a node and returns
// when it is Ready, the kube-system DNS answers, kube-proxy serves and kube-router's firewall is
// in place.
func Start(ctx context.Context, opts Options) (*Node, error) {
	began := time.Now()
	n, err := newNodeWithBin(opts)
	if err != nil {
		return nil, err
	}
	if err := n.Cleanup(); err != nil {
		return nil, fmt.Errorf("cleaning up the previous node %q: %w", n.opts.Name, err)
	}
	if err := n.start(ctx); err != nil {
		if stopErr := n.Stop(); stopErr != nil {
			err = fmt.Errorf("%w (stopping: %v)", err, stopErr)
		}
		return nil, err
	}
	n.Started = time.Since(began)
	n.opts.Logf("kubenode: node %s ready in %s; KUBECONFIG=%s", n.opts.Name, n.Started.Round(time.Second),
		n.KubeconfigPath)
	return n, nil
}

func newNode(opts Options) (*Node, error) {
	if opts.Name == "" {
		opts.Name = "node"
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 3 * time.Minute
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("a node needs root (namespaces, cgroups, mounts)")
	}
	n := &Node{opts: opts, bin: opts.Bin, RunDir: "/run/kcl-" + opts.Name, DataDir: opts.DataDir}
	if n.DataDir == "" {
		root, err := fluxenv.RepoRoot()
		if err != nil {
			return nil, err
		}
		n.DataDir = filepath.Join(root, "bin", "node-"+opts.Name)
	}
	n.LogDir = filepath.Join(n.DataDir, "logs")
	return n, nil
}

// newNodeWithBin is newNode with the binaries resolved (opts.Bin, else bin/*.env): what running
// components needs, and cleaning up does not.
func newNodeWithBin(opts Options) (*Node, error) {
	n, err := newNode(opts)
	if err != nil {
		return nil, err
	}
	if n.bin == nil {
		if n.bin, err = LoadBin(); err != nil {
			return nil, err
		}
	}
	return n, nil
}

func (n *Node) cgroupRoot() string { return "/kcl-" + n.opts.Name }
func (n *Node) sysctlRecord() string {
	return filepath.Join(filepath.Dir(n.DataDir), ".kcl-"+n.opts.Name+".sysctl.json")
}
func (n *Node) apiServerURL() string {
	return "https://" + net.JoinHostPort(NodeIP, strconv.Itoa(apiServerPort))
}
func (n *Node) ContainerdSocket() string {
	return filepath.Join(n.RunDir, "containerd", "containerd.sock")
}

func (n *Node) start(ctx context.Context) error {
	if err := os.RemoveAll(n.DataDir); err != nil {
		return err
	}
	for _, d := range []string{n.RunDir, n.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := saveSysctls(n.sysctlRecord()); err != nil {
		return err
	}
	if err := n.createNamespaces(); err != nil {
		return err
	}
	if err := createCgroupRoot(n.cgroupRoot()); err != nil {
		return err
	}
	if err := n.writePKI(); err != nil {
		return err
	}
	if err := n.writeConfigs(); err != nil {
		return err
	}
	for _, step := range []func(context.Context) error{
		n.startControlPlane, n.startRuntime, n.startKubelet, n.startNetwork, n.startForwarder,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// writePKI issues every certificate and kubeconfig the components use.
func (n *Node) writePKI() error {
	var err error
	if n.pki, err = newPKI(n.data("pki")); err != nil {
		return err
	}
	hosts := []string{NodeIP, "127.0.0.1", APIServiceIP, "localhost", "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain}
	if err := n.pki.issue("apiserver", "kube-apiserver", nil, hosts); err != nil {
		return err
	}
	if err := n.pki.issue(apiserverKubeletIdentity.file, apiserverKubeletIdentity.cn,
		apiserverKubeletIdentity.orgs, nil); err != nil {
		return err
	}
	if err := n.pki.serviceAccountKey(); err != nil {
		return err
	}
	for _, k := range []struct {
		id   identity
		file string
	}{
		{adminIdentity, "admin.kubeconfig"}, {kubeletIdentity, "kubelet/kubeconfig"},
		{controllerManagerIdentity, "controller-manager.kubeconfig"}, {schedulerIdentity, "scheduler.kubeconfig"},
		{proxyIdentity, "kube-proxy/kubeconfig"}, {corednsIdentity, "coredns/kubeconfig"},
		{kubeRouterIdentity, "kube-router/kubeconfig"},
	} {
		id, file := k.id, k.file
		if err := os.MkdirAll(filepath.Dir(n.data(file)), 0o755); err != nil {
			return err
		}
		if err := n.pki.kubeconfig(id, n.apiServerURL(), n.data(file)); err != nil {
			return err
		}
	}
	return nil
}

// restConfig is admin access from this process, dialling inside the node's namespace.
func (n *Node) restConfig() (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", n.data("admin.kubeconfig"))
	if err != nil {
		return nil, err
	}
	cfg.Dial = n.DialContext
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

func (n *Node) newClient() error {
	var err error
	if n.Config, err = n.restConfig(); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	n.Client, err = client.New(n.Config, client.Options{Scheme: scheme})
	return err
}

// Stop stops every component, then removes what the node left on the machine (Cleanup). The
// data directory stays for its logs; the next Start replaces it.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() {
		var errs []error
		if n.forwarder != nil {
			errs = append(errs, n.forwarder.Close())
		}
		// the reverse of the start order: kubelet before containerd, the API server last
		// a component that takes long to stop is killed: nothing of the node outlives it
		for i := len(n.procs) - 1; i >= 0; i-- {
			if err := n.procs[i].Stop(5 * time.Second); err != nil {
				n.opts.Logf("kubenode: %v", err)
			}
		}
		errs = append(errs, n.Cleanup())
		n.stopErr = errors.Join(errs...)
	})
	return n.stopErr
}

// Cleanup removes everything a node of this name may have left on the machine, running or not:
// its processes (components, shims, containers), the namespaces, the cgroups, and the kernel
// tunables kubelet changed. What is already gone is no error.
func (n *Node) Cleanup() error {
	var errs []error
	errs = append(errs, killAll(processesOfNode(n.mntnsPath(), n.cgroupRoot())))
	errs = append(errs, removeNamespaces(n.RunDir, n.netnsName()))
	errs = append(errs, removeCgroupRoot(n.cgroupRoot()))
	errs = append(errs, restoreSysctls(n.sysctlRecord()))
	if err := os.RemoveAll(n.RunDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Cleanup removes what a node named opts.Name left on the machine, for instance after its owner
// was killed (see Node.Cleanup).
func Cleanup(opts Options) error {
	n, err := newNode(opts)
	if err != nil {
		return err
	}
	return n.Cleanup()
}

// Attach returns the running node named opts.Name, for the operations that need no ownership of
// its processes (importing images).
func Attach(opts Options) (*Node, error) {
	n, err := newNodeWithBin(opts)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(n.ContainerdSocket()); err != nil {
		return nil, fmt.Errorf("node %s does not run (`make node`): %w", n.opts.Name, err)
	}
	return n, nil
}
