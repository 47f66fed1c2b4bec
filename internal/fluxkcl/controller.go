package fluxkcl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// clientset is the kubeconfig's REST config and a clientset of it.
func (a *app) clientset() (*rest.Config, kubernetes.Interface, error) {
	cfg, err := a.restConfig()
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	return cfg, cs, err
}

// errNoDeployment means the controller is not installed as a Deployment: it runs outside the
// cluster (make demo, a laptop), where its servers are reached at the addresses it advertises.
var errNoDeployment = errors.New("no Deployment with the label " + controllerSelector + " found")

// controllerDeployment is the controller's Deployment, in whatever namespace it was installed.
func controllerDeployment(ctx context.Context, cs kubernetes.Interface) (*appsv1.Deployment, error) {
	list, err := cs.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: controllerSelector})
	if err != nil {
		return nil, fmt.Errorf("listing the controller's Deployment: %w", err)
	}
	if len(list.Items) == 0 {
		return nil, errNoDeployment
	}
	return &list.Items[0], nil
}

// managerContainer is the Deployment's container named manager.
func managerContainer(d *appsv1.Deployment) (*corev1.Container, error) {
	for i, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "manager" {
			return &d.Spec.Template.Spec.Containers[i], nil
		}
	}
	return nil, fmt.Errorf("the Deployment %s/%s has no container named manager", d.Namespace, d.Name)
}

// leaderPod is the Deployment's Ready Pod. Readiness includes leader election (the readyz check
// leader-election), so only the leader, which writes and serves the artifacts, is Ready.
func leaderPod(ctx context.Context, cs kubernetes.Interface, d *appsv1.Deployment) (*corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil {
		return nil, err
	}
	pods, err := cs.CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("listing the controller's Pods: %w", err)
	}
	for i, p := range pods.Items {
		if p.DeletionTimestamp == nil && podReady(&p) {
			return &pods.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no Ready Pod of Deployment %s/%s (%s): the controller has no leader yet",
		d.Namespace, d.Name, labels.Set(d.Spec.Selector.MatchLabels))
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// addrPort is the port of a listen address such as ":9090" or "127.0.0.1:9091".
func addrPort(addr string) (int, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(p)
}

// forwarding is a port-forward from this machine's loopback to a port of a Pod.
type forwarding struct {
	URL string
	// Pod is namespace/name of the Pod forwarded to
	Pod  string
	stop chan struct{}
	done chan error
}

// Close stops the port-forward.
func (f *forwarding) Close() error {
	close(f.stop)
	return <-f.done
}

// Done is closed, with the error that ended it, when the port-forward stops by itself.
func (f *forwarding) Done() <-chan error { return f.done }

// forwardToLeader port-forwards address:localPort (0 picks one) to the port of the controller's
// leader Pod that portOf reads from its Deployment, saying so with what it reaches. Without a
// Deployment the error is errNoDeployment.
func (a *app) forwardToLeader(ctx context.Context, what string, portOf func(*appsv1.Deployment) (int, error),
	address string, localPort int) (*forwarding, error) {
	cfg, cs, err := a.clientset()
	if err != nil {
		return nil, err
	}
	d, err := controllerDeployment(ctx, cs)
	if err != nil {
		return nil, err
	}
	port, err := portOf(d)
	if err != nil {
		return nil, err
	}
	pod, err := leaderPod(ctx, cs, d)
	if err != nil {
		return nil, err
	}
	a.log.Actionf("port-forwarding to the %s of Pod %s/%s", what, pod.Namespace, pod.Name)
	return a.portForward(ctx, cfg, cs, pod, address, localPort, port)
}

// portForward forwards address:localPort (0 picks one) to port of pod through the API server, as
// `kubectl port-forward` does: WebSockets, falling back to SPDY on older API servers. It reaches
// the Pod's loopback and is not subject to NetworkPolicies; it needs pods/portforward.
func (a *app) portForward(ctx context.Context, cfg *rest.Config, cs kubernetes.Interface, pod *corev1.Pod, address string, localPort, port int) (*forwarding, error) {
	target := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	dialer, err := portForwardDialer(cfg, target)
	if err != nil {
		return nil, err
	}
	f := &forwarding{Pod: pod.Namespace + "/" + pod.Name, stop: make(chan struct{}), done: make(chan error, 1)}
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{address}, []string{fmt.Sprintf("%d:%d", localPort, port)},
		f.stop, ready, io.Discard, a.stderr)
	if err != nil {
		return nil, err
	}
	go func() { f.done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-f.done:
		return nil, fmt.Errorf("port-forward to Pod %s/%s: %w", pod.Namespace, pod.Name, err)
	case <-ctx.Done():
		close(f.stop)
		return nil, fmt.Errorf("port-forward to Pod %s/%s: %w", pod.Namespace, pod.Name, ctx.Err())
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		close(f.stop)
		return nil, fmt.Errorf("port-forward to Pod %s/%s: no local port: %v", pod.Namespace, pod.Name, err)
	}
	f.URL = "http://" + net.JoinHostPort(address, strconv.Itoa(int(ports[0].Local)))
	return f, nil
}

func portForwardDialer(cfg *rest.Config, target *url.URL) (httpstream.Dialer, error) {
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, err
	}
	spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, target)
	ws, err := portforward.NewSPDYOverWebsocketDialer(target, cfg)
	if err != nil {
		return nil, err
	}
	return portforward.NewFallbackDialer(ws, spdyDialer, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	}), nil
}
