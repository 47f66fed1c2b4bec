package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fluxkcl"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
	"github.com/kcl-flux/kcl-artifact-controller/test/kubenode"
	"github.com/kcl-flux/kcl-artifact-controller/test/nodeinstall"
)

const (
	demoNS          = "demo"
	controllerImage = "ghcr.io/kcl-flux/kcl-artifact-controller:dev"
	// demoErrorRate is app-dev's error-rate check: the share of GET / answered 500 over the last
	// 10s (Prometheus scrapes every second; one replica, so the series come from one Pod).
	demoErrorRate = `sum(rate(demo_app_requests_total{code="500"}[10s])) / sum(rate(demo_app_requests_total[10s]))`
	demoWait      = 5 * time.Minute
)

// stage is one KCLArtifact of the demo's pipeline: dev, staging (after dev), prod (after
// staging, approved by a person).
type stage struct {
	Name    string `json:"name"`
	Target  string `json:"target"` // spec.kustomization.targetNamespace
	Message string `json:"message"`
}

var stages = []stage{
	{Name: "app-dev", Target: "demo-dev", Message: "hello from dev"},
	{Name: "app-staging", Target: "demo-staging", Message: "hello from staging"},
	{Name: "app-prod", Target: "demo-prod", Message: "hello from prod"},
}

type demoState struct {
	Namespace  string  `json:"namespace"`
	Kubectl    string  `json:"kubectl"`
	GitURL     string  `json:"gitURL"`
	YAMLPath   string  `json:"yamlPath"` // app-dev's rendered YAML on the artifact server
	GitRepo    string  `json:"gitRepo"`  // the bare repository on disk
	Prometheus string  `json:"prometheus"`
	Stages     []stage `json:"stages"`
	Release1   string  `json:"release1"` // source revisions
	Release2   string  `json:"release2"`
	Rejected   string  `json:"rejected"` // app-dev's quarantined artifact (release 2)
	Took       string  `json:"took"`
}

// stageObject is one stage's KCLArtifact. app-dev verifies each release by its error rate in
// Prometheus (promAddr), app-staging publishes what dev ran healthy and verified for 20s, app-prod
// what staging ran healthy, once a person approved it. Every stage rolls back a release that
// fails its health or its checks.
func stageObject(s stage, i int, promAddr string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `---
apiVersion: kcl.contrib.fluxcd.io/v1alpha1
kind: KCLArtifact
metadata:
  name: %s
  namespace: demo
spec:
  interval: 10m
  sourceRef:
    kind: GitRepository
    name: demo-app
  path: ./
  settings: [kcl.yaml]
  arguments:
    message: %s
    replicas: "1"
  remediation: {}
  kustomization:
    targetNamespace: %s
    wait: true
    timeout: 3m
    retryInterval: 10s
`, s.Name, s.Message, s.Target)
	switch i {
	case 0:
		fmt.Fprintf(&b, `  verify:
    interval: 2s
    duration: 20s
    failureLimit: 2
    checks:
      - name: error-rate
        prometheus:
          address: http://%s
          query: '%s'
        condition: value < 0.1
`, promAddr, demoErrorRate)
	case 1:
		fmt.Fprintf(&b, "  promotion:\n    from: {name: %s}\n    soak: 20s\n", stages[0].Name)
	case 2:
		fmt.Fprintf(&b, "  promotion:\n    from: {name: %s}\n    approval: Required\n", stages[1].Name)
	}
	return b.String()
}

// releaseSettings is the demo repository's kcl.yaml of a release: its number, which each stage
// answers beside its own message, and its error ratio.
func releaseSettings(release int, errorRatio float64) string {
	s := fmt.Sprintf("# the program's arguments, changed by a commit (spec.settings); each stage sets its own message\nkcl_options:\n  - key: release\n    value: \"%d\"\n", release)
	if errorRatio != 0 {
		s += fmt.Sprintf("  - key: error_ratio\n    value: %g\n", errorRatio)
	}
	return s
}

// demo is the running demo inside the supervisor.
type demo struct {
	node    *kubenode.Node
	inst    *nodeinstall.Installer
	client  client.Client
	began   time.Time
	traffic *demoTraffic
}

// step logs a finished step of the demo with its duration and the time since the start.
func (d *demo) step(what string, since time.Time) {
	log.Printf("demo: %s (%.1fs; %.0fs in all)", what, time.Since(since).Seconds(), time.Since(d.began).Seconds())
}

// startDemo installs Flux and this controller on the node, deploys fixtures/node-app through
// three stages, and plays a release that fails its verification in dev. The returned stop
// closes the Git server, Prometheus and the traffic.
func startDemo(ctx context.Context, p paths, node *kubenode.Node) (*demoState, func(), error) {
	d := &demo{node: node, began: time.Now()}
	var closers []func()
	stop := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	st, err := d.run(ctx, p, &closers)
	return st, stop, err
}

func (d *demo) run(ctx context.Context, p paths, closers *[]func()) (*demoState, error) {
	began := time.Now()
	tars, _ := filepath.Glob(filepath.Join(p.bin, "images", "*.tar"))
	if len(tars) == 0 {
		return nil, fmt.Errorf("no images in %s/images (make image)", p.bin)
	}
	for _, t := range tars {
		if err := d.node.ImportImage(ctx, t); err != nil {
			return nil, err
		}
	}
	d.step(fmt.Sprintf("%d images loaded into the node", len(tars)), began)
	kubectl := filepath.Join(p.bin, "node", "kubectl")
	d.inst = &nodeinstall.Installer{Kubectl: kubectl, Kubeconfig: d.node.KubeconfigPath, RepoRoot: p.root,
		WorkDir: filepath.Join(d.node.DataDir, "install"), Logf: log.Printf,
		// app-dev's checks query a Prometheus on the node's address, a private one the network
		// guard denies by default: allowed as a platform team allows its in-cluster Prometheus
		ControllerArgs: []string{"--kcl-deps-allowed-networks=" + kubenode.NodeIP + "/32"}}
	var err error
	if d.client, err = newDemoClient(d.node); err != nil {
		return nil, err
	}
	began = time.Now()
	versions, err := nodeinstall.BuiltFluxVersions(p.root)
	if err != nil {
		return nil, err
	}
	if err := d.inst.Flux(ctx, versions); err != nil {
		return nil, err
	}
	d.step("Flux installed", began)
	began = time.Now()
	if err := d.inst.Controller(ctx, controllerImage); err != nil {
		return nil, err
	}
	// the node enforces Flux's NetworkPolicies: without config/flux-system's, the controller
	// fetches no source from source-controller
	if err := d.inst.FluxSystemPolicies(ctx); err != nil {
		return nil, err
	}
	d.step("kcl-artifact-controller installed (config/default, --kcl-deps-allowed-networks="+kubenode.NodeIP+"/32)", began)

	ln, err := d.node.Listen("tcp", kubenode.NodeIP+":0")
	if err != nil {
		return nil, err
	}
	gitDir := filepath.Join(d.node.DataDir, "git")
	git, err := fluxenv.ServeGit(ln, filepath.Join(gitDir, "repos"), filepath.Join(gitDir, "work"),
		filepath.Join(d.node.LogDir, "git.log"))
	if err != nil {
		return nil, err
	}
	*closers = append(*closers, func() { _ = git.Close() })
	if _, err := git.CreateRepo("demo-app", filepath.Join(p.root, "fixtures", "node-app")); err != nil {
		return nil, err
	}
	sha1, err := git.CommitFiles("demo-app", "release 1", map[string]string{"kcl.yaml": releaseSettings(1, 0)})
	if err != nil {
		return nil, err
	}
	rev1 := fluxenv.DefaultBranch + "@sha1:" + sha1
	promAddr, err := d.node.FreeAddr()
	if err != nil {
		return nil, err
	}
	objects, err := renderObjects(git.URL("demo-app"), promAddr)
	if err != nil {
		return nil, err
	}
	began = time.Now()
	if _, err := d.inst.Apply(ctx, objects); err != nil {
		return nil, err
	}
	log.Printf("demo: applied the GitRepository demo/demo-app and the stages app-dev -> app-staging (soak 20s) -> app-prod (approval); release 1 is %s", rev1)

	// Prometheus in the node's network scrapes app-dev's Service, once it exists; traffic from
	// inside the node asks app-dev ten times a second, so that its error rate means something
	devSvc, err := d.waitServiceIP(ctx, stages[0].Target)
	if err != nil {
		return nil, err
	}
	promDir := filepath.Join(d.node.DataDir, "prometheus")
	_ = os.RemoveAll(promDir)
	prom, err := d.node.StartPrometheus(promAddr, []fluxenv.ScrapeJob{{Name: "demo-app", Targets: []string{net.JoinHostPort(devSvc, "80")}}},
		promDir, filepath.Join(d.node.LogDir, "prometheus.log"), log.Printf)
	if err != nil {
		return nil, err
	}
	*closers = append(*closers, func() { _ = prom.Close() })
	d.traffic = startTraffic(d.node, "http://"+net.JoinHostPort(devSvc, "80")+"/")
	*closers = append(*closers, d.traffic.stop)
	log.Printf("demo: Prometheus at http://%s scrapes app-dev's Service %s; traffic asks app-dev 10 times a second", promAddr, devSvc)

	// release 1 through dev (verified) and staging; prod waits for a person
	if err := d.waitAnswer(ctx, stages[0], "1"); err != nil {
		return nil, err
	}
	d.step("app-dev answers release 1", began)
	dev, err := d.waitKCL(ctx, stages[0].Name, "app-dev Verified=True", func(o *kclv1.KCLArtifact) bool {
		c := conditions.Get(o, kclv1.VerifiedCondition)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == kclv1.VerificationPassedReason
	})
	if err != nil {
		return nil, err
	}
	good := dev.Status.Artifact.Digest
	d.step("app-dev verified release 1: "+conditions.GetMessage(dev, kclv1.VerifiedCondition), began)
	if err := d.waitAnswer(ctx, stages[1], "1"); err != nil {
		return nil, err
	}
	d.step("app-staging published release 1 and answers it", began)
	prod, err := d.waitKCL(ctx, stages[2].Name, "app-prod waiting for approval", func(o *kclv1.KCLArtifact) bool {
		return conditions.GetReason(o, kclv1.PromotedCondition) == kclv1.WaitingForApprovalReason
	})
	if err != nil {
		return nil, err
	}
	d.step("app-prod rendered release 1 ahead and waits for approval of "+waitingDigest(prod, rev1), began)

	// release 2: half of GET / answered 500, healthy by kustomize-controller's checks
	began = time.Now()
	sha2, err := git.CommitFiles("demo-app", "release 2 (answers half of GET / with 500)",
		map[string]string{"kcl.yaml": releaseSettings(2, 0.5)})
	if err != nil {
		return nil, err
	}
	rev2 := fluxenv.DefaultBranch + "@sha1:" + sha2
	log.Printf("demo: committed release 2 (%s): error_ratio 0.5", rev2)
	if _, err := d.inst.Run(ctx, "-n", demoNS, "annotate", "--overwrite", "gitrepository/demo-app",
		"reconcile.fluxcd.io/requestedAt="+time.Now().Format(time.RFC3339Nano)); err != nil {
		return nil, err
	}
	dev, err = d.waitKCL(ctx, stages[0].Name, "release 2 healthy in app-dev", func(o *kclv1.KCLArtifact) bool {
		return entryOf(o, rev2) != nil && entryOf(o, rev2).Health == kclv1.HealthHealthy
	})
	if err != nil {
		return nil, err
	}
	d.step("app-dev applied release 2, healthy by kustomize-controller's checks", began)
	dev, err = d.waitKCL(ctx, stages[0].Name, "app-dev rolled back to release 1", func(o *kclv1.KCLArtifact) bool {
		c := conditions.Get(o, kclv1.RemediatedCondition)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == kclv1.RolledBackReason &&
			o.Status.Artifact != nil && o.Status.Artifact.Digest == good
	})
	if err != nil {
		return nil, err
	}
	var rejected string
	if r := dev.Status.Remediation; r != nil && r.Quarantined != nil {
		rejected = r.Quarantined.Digest
		log.Printf("demo: app-dev quarantined %s: %s", r.Quarantined.Digest, r.Quarantined.Failure.Message)
	}
	d.step("app-dev rolled back release 2 for its error rate", began)
	if err := d.waitAnswer(ctx, stages[0], "1"); err != nil {
		return nil, err
	}
	d.step("app-dev answers release 1 again", began)
	if _, err := d.waitKCL(ctx, stages[0].Name, "app-dev applied release 1 again, Verified=True", func(o *kclv1.KCLArtifact) bool {
		return conditions.IsTrue(o, kclv1.KustomizationReadyCondition) && conditions.IsTrue(o, kclv1.VerifiedCondition)
	}); err != nil {
		return nil, err
	}
	d.step("app-dev applied release 1 again, which keeps its verdict (Verified=True)", began)
	staging, err := d.waitKCL(ctx, stages[1].Name, "app-staging Promoted=False UpstreamFailed", func(o *kclv1.KCLArtifact) bool {
		return conditions.GetReason(o, kclv1.PromotedCondition) == kclv1.UpstreamFailedReason
	})
	if err != nil {
		return nil, err
	}
	if e := entryOf(staging, rev2); e != nil {
		return nil, fmt.Errorf("app-staging published release 2 (%s), which failed its verification in app-dev", e.Digest)
	}
	if staging.Status.SourceRevision != rev1 {
		return nil, fmt.Errorf("app-staging serves %s, want release 1 (%s)", staging.Status.SourceRevision, rev1)
	}
	d.step("app-staging never published release 2: "+conditions.GetMessage(staging, kclv1.PromotedCondition), began)
	log.Printf("demo: traffic to app-dev so far: %s", d.traffic)

	// the artifact server answers only with the token the published URL carries
	yamlURL, err := url.Parse(artifactstore.Sibling(dev.Status.Artifact.URL, "latest.yaml"))
	if err != nil {
		return nil, err
	}
	took := time.Since(d.began).Round(time.Second).String()
	log.Printf("demo: ready in %s", took)
	return &demoState{Namespace: demoNS, Kubectl: kubectl, GitURL: git.URL("demo-app"), GitRepo: git.RepoPath("demo-app"), YAMLPath: yamlURL.RequestURI(),
		Prometheus: "http://" + promAddr, Stages: stages, Release1: rev1, Release2: rev2, Rejected: rejected, Took: took}, nil
}

// renderObjects is what a user applies: the target namespaces, each granting the demo
// namespace's reconciler (as a multi-tenant install, kustomize-controller
// --default-service-account, needs), a GitRepository and the three stages.
func renderObjects(gitURL, promAddr string) (string, error) {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n")
	for _, s := range stages {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", s.Target)
		fmt.Fprintf(&b, `---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: demo-reconciler
  namespace: %s
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects: [{kind: ServiceAccount, name: default, namespace: demo}]
`, s.Target)
	}
	fmt.Fprintf(&b, `---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata:
  name: demo-app
  namespace: demo
spec:
  interval: 10s
  url: %s
  ref:
    branch: main
`, gitURL)
	for i, s := range stages {
		b.WriteString(stageObject(s, i, promAddr))
	}
	return b.String(), nil
}

func newDemoClient(node *kubenode.Node) (client.Client, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := kclv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	return client.New(node.Config, client.Options{Scheme: scheme})
}

// waitKCL waits until the KCLArtifact name of the demo namespace satisfies ok, and returns it.
func (d *demo) waitKCL(ctx context.Context, name, what string, ok func(*kclv1.KCLArtifact) bool) (*kclv1.KCLArtifact, error) {
	var obj kclv1.KCLArtifact
	err := fluxenv.WaitFor(ctx, demoWait, what, func(ctx context.Context) (bool, string, error) {
		if err := d.client.Get(ctx, client.ObjectKey{Namespace: demoNS, Name: name}, &obj); err != nil {
			return false, "", err
		}
		var parts []string
		for _, c := range obj.Status.Conditions {
			parts = append(parts, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
		}
		return ok(&obj), strings.Join(parts, "; "), nil
	})
	return &obj, err
}

// waitServiceIP waits for the demo application's Service in ns and returns its ClusterIP.
func (d *demo) waitServiceIP(ctx context.Context, ns string) (string, error) {
	var ip string
	err := fluxenv.WaitFor(ctx, demoWait, "the Service "+ns+"/demo-app", func(ctx context.Context) (bool, string, error) {
		out, err := d.inst.Run(ctx, "-n", ns, "get", "service", "demo-app", "-o", "jsonpath={.spec.clusterIP}", "--ignore-not-found")
		ip = strings.TrimSpace(out)
		return err == nil && ip != "", "no Service yet", err
	})
	return ip, err
}

// waitAnswer waits until the stage's application answers its message of release from inside
// the node, through its Service.
func (d *demo) waitAnswer(ctx context.Context, s stage, release string) error {
	want := fmt.Sprintf("%s (release %s)", s.Message, release)
	hc := d.node.HTTPClient(2 * time.Second)
	return fluxenv.WaitFor(ctx, demoWait, s.Name+" answering "+want, func(ctx context.Context) (bool, string, error) {
		got, err := askApp(ctx, hc, "http://demo-app."+s.Target+".svc.cluster.local/")
		return err == nil && got == want, "answered " + got, err
	})
}

// askApp is the message the demo application answers at u.
func askApp(ctx context.Context, hc *http.Client, u string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var a struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return "", err
	}
	return a.Message, nil
}

// entryOf is obj's history entry of sourceRevision, nil when none.
func entryOf(obj *kclv1.KCLArtifact, sourceRevision string) *kclv1.ArtifactHistoryEntry {
	for i := range obj.Status.History {
		if obj.Status.History[i].SourceRevision == sourceRevision {
			return &obj.Status.History[i]
		}
	}
	return nil
}

// waitingDigest is the digest of the stage's artifact of sourceRevision waiting, "" when none.
func waitingDigest(obj *kclv1.KCLArtifact, sourceRevision string) string {
	if obj.Status.Promotion == nil {
		return ""
	}
	for _, w := range obj.Status.Promotion.Waiting {
		if w.SourceRevision == sourceRevision {
			return w.Digest
		}
	}
	return ""
}

// demoTraffic asks a URL ten times a second from inside the node and counts the answers.
type demoTraffic struct {
	mu       sync.Mutex
	messages map[string]int
	failed   int
	done     chan struct{}
	stopped  chan struct{}
}

func startTraffic(node *kubenode.Node, u string) *demoTraffic {
	t := &demoTraffic{messages: map[string]int{}, done: make(chan struct{}), stopped: make(chan struct{})}
	hc := node.HTTPClient(2 * time.Second)
	go func() {
		defer close(t.stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-t.done:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			m, err := askApp(ctx, hc, u)
			cancel()
			t.mu.Lock()
			if err != nil {
				t.failed++
			} else {
				t.messages[m]++
			}
			t.mu.Unlock()
		}
	}()
	return t
}

func (t *demoTraffic) stop() {
	close(t.done)
	<-t.stopped
}

func (t *demoTraffic) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("answers %v, %d errors (the deliberate 500s of release 2 among them)", t.messages, t.failed)
}

// reportDemo asks each stage's application through `kubectl port-forward`, as a user would, and
// prints the answers, the `flux kcl get` table and how to go on.
func reportDemo(p paths, st *state) error {
	d := st.Demo
	kc := d.Kubectl + " --kubeconfig " + st.Kubeconfig // the kubectl of the node's version
	fmt.Printf("\nThe demo application, rendered from fixtures/node-app by three stages in namespace %s and applied\nby Flux; each stage answers through kubectl port-forward:\n\n", d.Namespace)
	for _, s := range d.Stages {
		answer, err := portForwardAsk(st, s.Target)
		if err != nil {
			answer = "(" + err.Error() + ")"
		}
		fmt.Printf("    %-12s %-13s %s\n", s.Name, s.Target, answer)
	}
	fmt.Printf("\nRelease 2 (%s, error_ratio 0.5) was applied healthy in app-dev, failed its error-rate\ncheck and was rolled back (%s quarantined); app-staging never published it, app-prod never\nsaw it run.\n\n", short(d.Release2), short(d.Rejected))
	fmt.Printf("$ flux kcl get -n %s\n", d.Namespace)
	if code := fluxkcl.Main([]string{"get", "-n", d.Namespace, "--kubeconfig", st.Kubeconfig}, os.Stdout, os.Stderr); code != 0 {
		fmt.Printf("(flux kcl get exited %d)\n", code)
	}
	// the artifact of release 1 that app-prod rendered ahead; a newer one (of release 2) waits
	// too, for staging, which will never run it
	waiting, _ := exec.Command(d.Kubectl, "--kubeconfig", st.Kubeconfig, "-n", d.Namespace, "get", "kclartifact", "app-prod", "-o",
		`jsonpath={.status.promotion.waiting[?(@.sourceRevision=="`+d.Release1+`")].digest}`).Output()
	digest := strings.TrimSpace(string(waiting))
	if digest == "" {
		digest = "<digest>" // approved already, or a newer release passed
	}
	fmt.Printf(`
Took %s. Go on (export KUBECONFIG=%s;
alias flux='FLUXCD_PLUGINS=%s %s'):
  approve prod:     flux kcl approve app-prod %s -n demo
  or reject it:     flux kcl reject app-prod %s -n demo --reason "checkout errors"
                    (no stage promotes release 1 again; where it runs, it is rolled back if it can be)
  stop the line:    flux kcl stop-line -n demo --reason "incident 42"     (then: flux kcl resume-line -n demo)
  what happened:    flux kcl history app-dev -n demo; flux kcl get app-prod -n demo
  a new release:    git clone %s /tmp/demo-app; cd /tmp/demo-app
                    edit kcl.yaml (release "3"; error_ratio 0.5 fails it again); git commit -am "release 3"; git push
                    (source-controller fetches %s every 10s; app-dev verifies, staging follows)
  Prometheus:       %s inside the node, scraping app-dev; the check's query:
                    %s
  the objects:      %s -n demo get gitrepositories,kclartifacts,kustomizations
  ask a stage:      %s -n demo-dev port-forward svc/demo-app 8080:80   # then: curl http://127.0.0.1:8080/
  app-dev's YAML:   %s -n kcl-system port-forward svc/kcl-artifact-controller 9090:80
                    then: curl 'http://127.0.0.1:9090%s'
  make demo-node-down stops everything.
`, d.Took, st.Kubeconfig, p.bin, filepath.Join(p.bin, "flux-cli", "flux"), digest, digest, d.GitRepo, d.GitURL, d.Prometheus,
		demoErrorRate, kc, kc, kc, d.YAMLPath)
	return nil
}

// short is a digest or revision with 12 hex digits ("sha256:74d879de5faa…", "main@sha1:b061ebb48e51…").
func short(digest string) string {
	i := strings.LastIndexByte(digest, ':')
	if i >= 0 && len(digest) > i+13 {
		return digest[:i+13] + "…"
	}
	return digest
}

// portForwardAsk asks the demo application of ns through `kubectl port-forward svc/demo-app`;
// a stage that has published nothing yet has no Service.
func portForwardAsk(st *state, ns string) (string, error) {
	d := st.Demo
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, d.Kubectl, "--kubeconfig", st.Kubeconfig, "-n", ns, "get", "service", "demo-app",
		"--ignore-not-found", "-o", "name").Output(); err != nil || strings.TrimSpace(string(out)) == "" {
		return "", fmt.Errorf("nothing deployed yet: release 1 waits for approval")
	}
	cmd := exec.CommandContext(ctx, d.Kubectl, "--kubeconfig", st.Kubeconfig, "-n", ns, "port-forward", "svc/demo-app", ":80")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var local string
	sc := bufio.NewScanner(out)
	for sc.Scan() { // "Forwarding from 127.0.0.1:PORT -> 8080"
		if f := strings.Fields(sc.Text()); len(f) >= 3 && strings.HasPrefix(f[2], "127.0.0.1:") {
			local = f[2]
			break
		}
	}
	if local == "" {
		return "", fmt.Errorf("kubectl port-forward printed no local address")
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	resp, err := http.Get("http://" + local + "/?format=text")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return strings.TrimSpace(string(body)) + "   (http://" + local + ")", nil
}
