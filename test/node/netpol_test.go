package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// probeImage is the demo app, whose probe mode (test/nodeimage/demoapp/probe.go) GETs a URL
	// from inside its Pod and tells the test what it got.
	probeImage = "ghcr.io/kcl-flux/demo-app:v1"
	// monitoringNS is the namespace config/networkpolicy/allow-scraping.yaml admits to the metrics.
	monitoringNS = "monitoring"
	// fromNode is the node itself, where kubelet's probes come from.
	fromNode = "node"
	// pathsTimeout bounds how long the policy engine may take to program the rules of new Pods.
	pathsTimeout = 2 * time.Minute
)

// netPath is one connection a Pod (or the node) tries, and whether the policies must let it open.
type netPath struct {
	from, what, url string
	allowed         bool
}

// probeResult is what the probe answers (test/nodeimage/demoapp/probe.go).
type probeResult struct {
	URL    string `json:"url"`
	Status int    `json:"status"`
	Error  string `json:"error,omitempty"`
}

// TestNetworkPolicies proves config/networkpolicy (installed with config/default in kcl-system)
// and config/flux-system (applied next to Flux's own policies in flux-system) as the node's policy
// engine enforces them, each path tried from a real Pod: a tenant opens none of the controller's
// ports nor Flux's artifact and event servers; flux-system fetches artifacts; the controller's
// identity reaches source-controller and notification-controller; only the monitoring namespace
// scrapes; kubelet still probes the health port. Every blocked URL is also opened from an
// allowed place in the same round, so a port that is merely down cannot pass as blocked.
func TestNetworkPolicies(t *testing.T) {
	ctx := context.Background()
	// the platform repository applies config/flux-system with flux-system (nodeinstall.Platform)
	for _, name := range []string{"allow-kcl-artifact-controller-events", "allow-kcl-artifact-controller-sources"} {
		var np networkingv1.NetworkPolicy
		if err := suite.client.Get(ctx, client.ObjectKey{Namespace: "flux-system", Name: name}, &np); err != nil {
			t.Fatalf("config/flux-system's %s is not in flux-system: %v", name, err)
		}
	}
	ctrl, err := controllerPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	restarts := ctrl.Status.ContainerStatuses[0].RestartCount
	src := readyPod(t, "flux-system", "app", "source-controller")
	tenant := newNamespace(t, "tenant-netpol")
	ensureNamespace(t, monitoringNS)
	standIn := notificationStandIn(t)
	probes := map[string]string{fromNode: ""}
	for name, p := range map[string]*corev1.Pod{
		"tenant":      probePod(tenant, nil, false),
		"flux-system": probePod("flux-system", nil, false),
		"monitoring":  probePod(monitoringNS, nil, false),
		// the controller's network identity: its namespace and labels. Never Ready, so that the
		// controller's Service does not send artifact requests to it.
		"controller-identity": probePod(controllerNS, map[string]string{"app.kubernetes.io/name": "kcl-artifact-controller"}, true),
	} {
		probes[name] = startProbe(t, p)
	}
	paths := controllerPaths(ctrl.Status.PodIP)
	paths = append(paths, fluxPaths(src.Status.PodIP, standIn.Status.PodIP)...)
	checkControls(t, paths)
	waitPaths(t, probes, paths)

	t.Run("a tenant's KCLArtifact is fetched and applied under enforcement", func(t *testing.T) {
		// the Git server's repositories share one name space: not "app", which other tests take
		sha := createRepo(t, tenant, "tenant-app", "node-app", map[string]string{"kcl.yaml": settingsFile(map[string]any{"message": "tenant"})})
		create(t, appArtifact(tenant, "tenant-app"))
		waitApplied(t, tenant, "app", gitRevision(sha))
		waitAnswers(t, tenant, "tenant", "")
	})
	t.Run("the controller stayed Ready: kubelet's probes pass", func(t *testing.T) {
		now, err := controllerPod(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if now.UID != ctrl.UID || now.Status.ContainerStatuses[0].RestartCount != restarts {
			t.Fatalf("controller Pod %s (restarts %d) is now %s (restarts %d)", ctrl.Name, restarts, now.Name,
				now.Status.ContainerStatuses[0].RestartCount)
		}
	})
}

// controllerPaths: the controller's artifact server (Service and Pod), metrics and health ports.
func controllerPaths(ip string) []netPath {
	artifactsSvc := "http://kcl-artifact-controller." + controllerNS + ".svc.cluster.local./"
	artifactsPod := "http://" + net.JoinHostPort(ip, "9090") + "/"
	metrics := "http://" + net.JoinHostPort(ip, "8080") + "/metrics"
	health := "http://" + net.JoinHostPort(ip, "9440") + "/healthz"
	return []netPath{
		{"tenant", "artifact server (Service)", artifactsSvc, false},
		{"tenant", "artifact server (Pod IP)", artifactsPod, false},
		{"tenant", "metrics port", metrics, false},
		{"tenant", "health port", health, false},
		{"flux-system", "artifact server (Service)", artifactsSvc, true},
		{"flux-system", "artifact server (Pod IP)", artifactsPod, true},
		{"flux-system", "metrics port", metrics, false},
		{"flux-system", "health port", health, false},
		{"monitoring", "metrics port", metrics, true},
		{"monitoring", "artifact server (Service)", artifactsSvc, false},
		{"monitoring", "health port", health, false},
		{fromNode, "health port (kubelet's probes)", health, true},
	}
}

// fluxPaths: source-controller's artifact server and notification-controller's event receiver,
// under Flux's own policies plus config/flux-system.
func fluxPaths(srcIP, standInIP string) []netPath {
	sourcesSvc := "http://source-controller.flux-system.svc.cluster.local./"
	sourcesPod := "http://" + net.JoinHostPort(srcIP, "9090") + "/"
	// the controller's --events-addr (config/manager/deployment.yaml)
	eventsSvc := "http://notification-controller.flux-system.svc.cluster.local./"
	eventsPod := "http://" + net.JoinHostPort(standInIP, "9090") + "/"
	return []netPath{
		{"controller-identity", "source-controller's artifacts (Service)", sourcesSvc, true},
		{"controller-identity", "source-controller's artifacts (Pod IP)", sourcesPod, true},
		{"controller-identity", "notification-controller's events (Service)", eventsSvc, true},
		{"controller-identity", "notification-controller's events (Pod IP)", eventsPod, true},
		{"tenant", "source-controller's artifacts (Service)", sourcesSvc, false},
		{"tenant", "source-controller's artifacts (Pod IP)", sourcesPod, false},
		{"tenant", "notification-controller's events (Service)", eventsSvc, false},
		{"tenant", "notification-controller's events (Pod IP)", eventsPod, false},
		{"flux-system", "notification-controller's events (Service)", eventsSvc, true},
		{"monitoring", "notification-controller's events (Service)", eventsSvc, false},
	}
}

// checkControls: every URL that must be blocked somewhere is opened from somewhere else.
func checkControls(t *testing.T, paths []netPath) {
	t.Helper()
	opened := map[string]bool{}
	for _, p := range paths {
		opened[p.url] = opened[p.url] || p.allowed
	}
	for _, p := range paths {
		if !opened[p.url] {
			t.Fatalf("%s (%s) has no allowed path to compare its blocked ones with", p.what, p.url)
		}
	}
}

// waitPaths tries every path, in rounds, until one round finds each as the policies require
// (the engine programs a new Pod's rules after it starts), then reports each path.
func waitPaths(t *testing.T, probes map[string]string, paths []netPath) {
	t.Helper()
	deadline := time.Now().Add(pathsTimeout)
	for {
		results, wrong := tryPaths(probes, paths)
		if wrong == 0 || time.Now().After(deadline) {
			for i, p := range paths {
				r := results[i]
				want := map[bool]string{true: "allowed", false: "blocked"}[p.allowed]
				line := fmt.Sprintf("%-19s -> %-44s %s: %s", p.from, p.what, want, describe(r))
				if holds(p, r) {
					t.Logf("ok    %s", line)
				} else {
					t.Errorf("WRONG %s (%s)", line, p.url)
				}
			}
			return
		}
		time.Sleep(time.Second) // the pace of the rounds; each round is its own check
	}
}

func tryPaths(probes map[string]string, paths []netPath) ([]probeResult, int) {
	results := make([]probeResult, len(paths))
	wrong := 0
	for i, p := range paths {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		results[i] = try(ctx, probes[p.from], p)
		cancel()
		if !holds(p, results[i]) {
			wrong++
		}
	}
	return results, wrong
}

// holds: an allowed path got an HTTP answer; a blocked one got no connection (refused or timed
// out), not merely a name that does not resolve.
func holds(p netPath, r probeResult) bool {
	if p.allowed {
		return r.Status > 0
	}
	return r.Status == 0 && r.Error != "" && !strings.Contains(r.Error, "no such host")
}

func describe(r probeResult) string {
	if r.Status > 0 {
		return fmt.Sprintf("opened: HTTP %d", r.Status)
	}
	return "no connection: " + r.Error
}

// try makes the request from the probe at probeIP, or from the node itself.
func try(ctx context.Context, probeIP string, p netPath) probeResult {
	if p.from == fromNode {
		r, _ := get(ctx, p.url)
		return r
	}
	relay := "http://" + net.JoinHostPort(probeIP, "8080") + "/probe?url=" + url.QueryEscape(p.url)
	r, body := get(ctx, relay)
	if r.Status != http.StatusOK {
		return probeResult{URL: p.url, Error: "the probe did not answer: " + describe(r)}
	}
	var res probeResult
	if err := json.Unmarshal(body, &res); err != nil {
		return probeResult{URL: p.url, Error: "the probe's answer: " + err.Error()}
	}
	return res
}

// get GETs u from the node's network namespace.
func get(ctx context.Context, u string) (probeResult, []byte) {
	res := probeResult{URL: u}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		res.Error = err.Error()
		return res, nil
	}
	resp, err := suite.node.HTTPClient(10 * time.Second).Do(req)
	if err != nil {
		res.Error = err.Error()
		return res, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	res.Status = resp.StatusCode
	return res, body
}

// probePod is a Pod running the probe in ns, as the restricted Pod Security level admits it.
// neverReady holds it out of every Service's endpoints (a readiness gate nothing sets).
func probePod(ns string, labels map[string]string, neverReady bool) *corev1.Pod {
	if labels == nil {
		labels = map[string]string{"app.kubernetes.io/name": "netpol-probe"}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "netpol-probe", Labels: labels},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](2),
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "probe", Image: probeImage, ImagePullPolicy: corev1.PullIfNotPresent,
				Args:  []string{"probe", "-port", "8080"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities:           &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	if neverReady {
		p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "kcl.test/never"}}
	}
	return p
}

// startProbe creates the probe Pod, deleted when the test ends, and returns its IP once it answers.
func startProbe(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	ip := startPod(t, p)
	waitFor(t, "probe "+p.Namespace+"/"+p.Name+" answering", func(ctx context.Context) (bool, string, error) {
		r, _ := get(ctx, "http://"+net.JoinHostPort(ip, "8080")+"/healthz")
		return r.Status == http.StatusOK, describe(r), nil
	})
	return ip
}

// startPod creates a Pod, deleted when the test ends, and returns its IP once it runs.
func startPod(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	create(t, p)
	t.Cleanup(func() { _ = suite.client.Delete(context.Background(), p) })
	var ip string
	waitFor(t, "Pod "+p.Namespace+"/"+p.Name+" running", func(ctx context.Context) (bool, string, error) {
		if err := suite.client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
			return false, "", err
		}
		ip = p.Status.PodIP
		return p.Status.Phase == corev1.PodRunning && ip != "", string(p.Status.Phase), nil
	})
	return ip
}

// notificationStandIn stands in for notification-controller, which is not built here: a Pod
// labelled app: notification-controller serving on its port http (9090) and the Service
// notification-controller (80 -> http), as in Flux's manifests, so that Flux's policies and
// config/flux-system select it as they select the real one. The demo app answers any GET /.
func notificationStandIn(t *testing.T) *corev1.Pod {
	t.Helper()
	labels := map[string]string{"app": "notification-controller"}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "flux-system", Name: "notification-controller", Labels: labels},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{
			Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromString("http")}}},
	}
	create(t, svc)
	t.Cleanup(func() { _ = suite.client.Delete(context.Background(), svc) })
	p := probePod("flux-system", labels, false)
	p.Name = "notification-controller-stand-in"
	c := &p.Spec.Containers[0]
	c.Args = []string{"-port", "9090"}
	c.Env = []corev1.EnvVar{{Name: "MESSAGE", Value: "notification-controller stand-in"}}
	c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 9090}}
	startPod(t, p)
	return p
}

// readyPod is the Ready Pod labelled key=value in ns.
func readyPod(t *testing.T, ns, key, value string) *corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := suite.client.List(context.Background(), &pods, client.InNamespace(ns),
		client.MatchingLabels{key: value}); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && podReady(p) {
			return p
		}
	}
	t.Fatalf("no Ready Pod %s=%s in %s", key, value, ns)
	return nil
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := suite.client.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}
