package kubenode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// launch starts a component inside the node's namespaces, its output in logs/<name>.log.
func (n *Node) launch(name, bin string, args ...string) (*fluxenv.Process, error) {
	cmd := n.enter(append([]string{bin}, args...)...)
	env := []string{"PATH=" + n.bin.path(), "HOME=" + n.DataDir, "TMPDIR=" + n.data("tmp")}
	if err := os.MkdirAll(n.data("tmp"), 0o755); err != nil {
		return nil, err
	}
	p, err := fluxenv.StartProcess(name, cmd[0], cmd[1:], env, filepath.Join(n.LogDir, name+".log"))
	if err != nil {
		return nil, err
	}
	n.procs = append(n.procs, p)
	return p, nil
}

// waitFor polls check until it returns nil, the process exits, or the start timeout passes; the
// error carries the component's log tail.
func (n *Node) waitFor(ctx context.Context, p *fluxenv.Process, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, n.opts.StartTimeout)
	defer cancel()
	last := errors.New("not checked yet")
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-p.Done():
			_, werr := p.Exited()
			return fmt.Errorf("%s exited (%v) before %s; last lines of %s:\n%s", p.Name, werr, what, p.LogPath,
				fluxenv.Tail(p.LogPath, 30))
		case <-ctx.Done():
			return fmt.Errorf("%s: not %s after %s (last: %v); last lines of %s:\n%s", p.Name, what,
				n.opts.StartTimeout, last, p.LogPath, fluxenv.Tail(p.LogPath, 30))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// httpCheck GETs url inside the node's namespace and wants 200. With tlsCerts the client presents
// the admin certificate and trusts the node's CA.
func (n *Node) httpCheck(url string, admin bool) func(context.Context) error {
	tr := &http.Transport{DialContext: n.DialContext, Proxy: nil}
	if admin {
		pool := x509.NewCertPool()
		ca, _ := os.ReadFile(n.pki.path("ca.crt"))
		pool.AppendCertsFromPEM(ca)
		cert, _ := tls.LoadX509KeyPair(n.pki.path("admin.crt"), n.pki.path("admin.key"))
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
	}
	hc := &http.Client{Transport: tr}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s %s", url, resp.Status, body)
		}
		return nil
	}
}

func (n *Node) startControlPlane(ctx context.Context) error {
	n.opts.Logf("kubenode: etcd, kube-apiserver")
	etcd, err := n.launch("etcd", n.bin.Etcd, "--data-dir", n.data("etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379", "--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "default=http://127.0.0.1:2380", "--unsafe-no-fsync")
	if err != nil {
		return err
	}
	if err := n.waitFor(ctx, etcd, "healthy", n.httpCheck("http://127.0.0.1:2379/health", false)); err != nil {
		return err
	}
	p := n.pki.path
	apiserver, err := n.launch("kube-apiserver", n.bin.KubeAPIServer,
		"--etcd-servers", "http://127.0.0.1:2379",
		"--advertise-address", NodeIP, "--bind-address", "0.0.0.0", "--secure-port", strconv.Itoa(apiServerPort),
		"--tls-cert-file", p("apiserver.crt"), "--tls-private-key-file", p("apiserver.key"),
		"--client-ca-file", p("ca.crt"),
		"--kubelet-client-certificate", p("apiserver-kubelet-client.crt"),
		"--kubelet-client-key", p("apiserver-kubelet-client.key"),
		// the node's name resolves nowhere (there is no DNS for nodes); its address is known
		"--kubelet-preferred-address-types", "InternalIP",
		"--service-account-key-file", p("sa.pub"), "--service-account-signing-key-file", p("sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc."+ClusterDomain,
		"--service-cluster-ip-range", ServiceCIDR, "--authorization-mode", "Node,RBAC",
		"--enable-admission-plugins", "NodeRestriction", "--allow-privileged=true",
		"--profiling=false", "--v=1")
	if err != nil {
		return err
	}
	if err := n.waitFor(ctx, apiserver, "ready", n.httpCheck(n.apiServerURL()+"/readyz", true)); err != nil {
		return err
	}
	if err := n.newClient(); err != nil {
		return err
	}
	return n.startControllers(ctx)
}

func (n *Node) startControllers(ctx context.Context) error {
	p := n.pki.path
	cm, err := n.launch("kube-controller-manager", n.bin.KubeControllerManager,
		"--kubeconfig", n.data("controller-manager.kubeconfig"), "--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", "10257",
		"--authentication-kubeconfig", n.data("controller-manager.kubeconfig"),
		"--authorization-kubeconfig", n.data("controller-manager.kubeconfig"),
		"--service-account-private-key-file", p("sa.key"), "--root-ca-file", p("ca.crt"),
		"--cluster-signing-cert-file", p("ca.crt"), "--cluster-signing-key-file", p("ca.key"),
		"--use-service-account-credentials=true", "--controllers=*", "--v=1")
	if err != nil {
		return err
	}
	sched, err := n.launch("kube-scheduler", n.bin.KubeScheduler,
		"--kubeconfig", n.data("scheduler.kubeconfig"), "--leader-elect=false",
		"--authentication-kubeconfig", n.data("scheduler.kubeconfig"),
		"--authorization-kubeconfig", n.data("scheduler.kubeconfig"),
		"--bind-address", "127.0.0.1", "--secure-port", "10259", "--v=1")
	if err != nil {
		return err
	}
	// both serve /healthz without authentication on their secure ports
	insecure := func(url string) func(context.Context) error {
		hc := &http.Client{Transport: &http.Transport{DialContext: n.DialContext, Proxy: nil,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // self-signed serving certificates
		return func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", url, resp.Status)
			}
			return nil
		}
	}
	if err := n.waitFor(ctx, cm, "healthy", insecure("https://127.0.0.1:10257/healthz")); err != nil {
		return err
	}
	return n.waitFor(ctx, sched, "healthy", insecure("https://127.0.0.1:10259/healthz"))
}

func (n *Node) startRuntime(ctx context.Context) error {
	n.opts.Logf("kubenode: containerd")
	ctrd, err := n.launch("containerd", n.bin.Containerd, "--config", n.data("containerd", "config.toml"))
	if err != nil {
		return err
	}
	return n.waitFor(ctx, ctrd, "serving", func(context.Context) error {
		return n.ctr(ctx, nil, "version")
	})
}

func (n *Node) startKubelet(ctx context.Context) error {
	n.opts.Logf("kubenode: kubelet")
	kubelet, err := n.launch("kubelet", n.bin.Kubelet, "--config", n.data("kubelet", "config.yaml"),
		"--kubeconfig", n.data("kubelet", "kubeconfig"), "--root-dir", n.data("kubelet", "root"),
		"--cert-dir", n.data("kubelet", "pki"), "--hostname-override", NodeName, "--node-ip", NodeIP, "--v=1")
	if err != nil {
		return err
	}
	return n.waitFor(ctx, kubelet, "Ready", func(ctx context.Context) error {
		var node corev1.Node
		if err := n.Client.Get(ctx, client.ObjectKey{Name: NodeName}, &node); err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("node %s: %s", c.Reason, c.Message)
			}
		}
		return errors.New("node has no Ready condition yet")
	})
}

// startNetwork starts kube-proxy (Services), CoreDNS (their names) and kube-router's
// NetworkPolicy firewall: the ptp CNI enforces no NetworkPolicy, and every Pod-to-Pod packet is
// routed through the node's namespace, where kube-router's FORWARD rules see it.
func (n *Node) startNetwork(ctx context.Context) error {
	n.opts.Logf("kubenode: kube-proxy, coredns, kube-router (network policies)")
	if err := n.grantCoreDNS(ctx); err != nil {
		return err
	}
	if err := n.grantKubeRouter(ctx); err != nil {
		return err
	}
	proxy, err := n.launch("kube-proxy", n.bin.KubeProxy, "--config", n.data("kube-proxy", "config.yaml"), "--v=1")
	if err != nil {
		return err
	}
	dns, err := n.launch("coredns", n.bin.CoreDNS, "-conf", n.data("coredns", "Corefile"))
	if err != nil {
		return err
	}
	router, err := n.launch("kube-router", n.bin.KubeRouter, n.kubeRouterArgs()...)
	if err != nil {
		return err
	}
	if err := n.waitFor(ctx, proxy, "healthy", n.httpCheck("http://"+proxyHealthz+"/healthz", false)); err != nil {
		return err
	}
	if err := n.waitFor(ctx, router, "healthy", n.httpCheck("http://"+routerHealthz+"/healthz", false)); err != nil {
		return err
	}
	// its health answers before the first sync: the firewall is in place once its chain is
	if err := n.waitFor(ctx, router, "with its chains in place", n.iptablesChainCheck("KUBE-ROUTER-FORWARD")); err != nil {
		return err
	}
	return n.waitFor(ctx, dns, "ready", n.httpCheck("http://"+corednsReady+"/ready", false))
}

// iptablesChainCheck: the node's iptables (the binary kube-proxy and kube-router run) lists chain.
func (n *Node) iptablesChainCheck(chain string) func(context.Context) error {
	return func(ctx context.Context) error {
		args := n.enter(n.bin.Iptables, "-w", "-n", "-L", chain)
		out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables -L %s: %v: %s", chain, err, out)
		}
		return nil
	}
}

// startForwarder exposes the API server on 127.0.0.1 of this machine for kubectl, and writes the
// kubeconfig that points there.
func (n *Node) startForwarder(ctx context.Context) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	n.forwarder = l
	go n.forward(l, net.JoinHostPort(NodeIP, strconv.Itoa(apiServerPort)))
	n.KubeconfigPath = n.data("kubeconfig")
	return writeKubeconfig(n.KubeconfigPath, "https://"+l.Addr().String(), n.pki.path("ca.crt"),
		n.pki.path("admin.crt"), n.pki.path("admin.key"))
}

// forward copies every connection accepted on l to target inside the node, until l is closed.
func (n *Node) forward(l net.Listener, target string) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			t, err := n.DialContext(ctx, "tcp", target)
			cancel()
			if err != nil {
				return
			}
			defer t.Close()
			done := make(chan struct{}, 2)
			cp := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
				done <- struct{}{}
			}
			go cp(t, c)
			go cp(c, t)
			<-done
			<-done
		}()
	}
}

// grantKubeRouter lets kube-router's identity read what its informers watch (it starts the
// informers of all its controllers, the firewall's pods, namespaces and policies among them).
func (n *Node) grantKubeRouter(ctx context.Context) error {
	return n.grant(ctx, kubeRouterIdentity, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "namespaces", "nodes", "services", "endpoints"},
			Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	})
}

// grantCoreDNS lets CoreDNS's identity read what its kubernetes plugin watches.
func (n *Node) grantCoreDNS(ctx context.Context) error {
	return n.grant(ctx, corednsIdentity, []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	})
}

// grant binds a ClusterRole of rules, named like the identity, to the identity's user.
func (n *Node) grant(ctx context.Context, id identity, rules []rbacv1.PolicyRule) error {
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: id.cn}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: id.cn},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: id.cn}}}
	for _, o := range []client.Object{role, binding} {
		if err := n.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("granting %s: %w", id.cn, err)
		}
	}
	return nil
}
