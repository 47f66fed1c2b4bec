// Command demo puts the KCL demo on the running dev cluster (test/cmd/devcluster up
// --with-kcl-controller) and shows it: in namespace demo, a GitRepository for demo.git
// (fixtures/demo) and a KCLArtifact podinfo rendering it with env=prod; then it waits, step by
// step, for the GitRepository, the KCLArtifact, the generated Kustomization and the applied
// objects, fetches the rendered YAML from the controller's artifact server, and prints how to
// look at and change everything. Then delivery (delivery.go): it pushes the next image tag and
// follows it through three stages until production waits for an approval. Run by `make demo`;
// idempotent: a second run finds everything in place (a spec changed by hand is set back to the
// demo's) and pushes a newer tag.
//
//	go run ./test/cmd/demo [--timeout 3m]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	imagev1 "github.com/fluxcd/image-reflector-controller/api/v1"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/test/cmd/devcluster/devstate"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

const (
	namespace = "demo"
	repoName  = "demo" // fixtures/demo, served as demo.git
	appName   = "podinfo"
	env       = "prod"
	replicas  = "2"
	logLines  = 30

	sourceController    = "source-controller"
	kustomizeController = "kustomize-controller"
	kclController       = "kcl-artifact-controller"
)

func main() {
	timeout := flag.Duration("timeout", 3*time.Minute, "how long each step may take")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, *timeout); err != nil {
		fmt.Fprintf(os.Stderr, "\ndemo: %v\n", err)
		os.Exit(1)
	}
}

type demo struct {
	ctx     context.Context
	timeout time.Duration
	p       devstate.Paths
	st      *devstate.State
	c       client.Client
}

func run(ctx context.Context, timeout time.Duration) error {
	p, err := devstate.GetPaths()
	if err != nil {
		return err
	}
	st, err := p.Running()
	if err != nil {
		return fmt.Errorf("%w; start it with `make demo`", err)
	}
	if st.KCLController == nil {
		return fmt.Errorf("the dev cluster (supervisor pid %d) runs without %s; stop it with `make demo-down` and run `make demo`",
			st.Supervisor.PID, kclController)
	}
	if dead := st.Dead(); len(dead) > 0 {
		return fmt.Errorf("the dev cluster runs but these processes exited: %s (logs in %s/); restart with `make demo-down` then `make demo`",
			devstate.Describe(dead), p.Rel(st.LogDir))
	}
	repoURL, ok := st.Repositories[repoName]
	if !ok {
		return fmt.Errorf("the dev cluster serves no %s.git (fixtures/%s is missing?)", repoName, repoName)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", st.Kubeconfig, err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, sourcev1.AddToScheme,
		kustomizev1.AddToScheme, kclv1.AddToScheme, imagev1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	d := &demo{ctx: ctx, timeout: timeout, p: p, st: st, c: c}
	return d.run(repoURL)
}

func (d *demo) run(repoURL string) error {
	gr, ka, err := d.apply(repoURL)
	if err != nil {
		return err
	}
	if err := d.waitRendered(gr, ka); err != nil {
		return err
	}
	o := &outcome{ka: ka}
	if o.ks, o.applied, err = d.waitMainApplied(ka); err != nil {
		return err
	}
	if err := d.fetchRendered(o); err != nil {
		return err
	}
	if o.others, err = d.runOtherSources(); err != nil {
		return err
	}
	if o.diff, err = d.changeAndDiff(o.others[0]); err != nil {
		return err
	}
	if o.delivery, err = d.runDelivery(); err != nil {
		return err
	}
	d.show(o)
	return nil
}

// outcome is what the demo shows at the end.
type outcome struct {
	ka                   *kclv1.KCLArtifact
	ks                   *kustomizev1.Kustomization
	applied              []string
	artifactURL, yamlURL string
	rendered, diff       string
	others               []*otherSource
	delivery             *deliveryOutcome
}

// apply creates the namespace, the GitRepository and the KCLArtifact, or sets them back to the
// demo's.
func (d *demo) apply(repoURL string) (*sourcev1.GitRepository, *kclv1.KCLArtifact, error) {
	if err := d.ensureNamespace(namespace); err != nil {
		return nil, nil, err
	}

	gr := &sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Name: repoName, Namespace: namespace}}
	res, err := d.upsert(gr, func() {
		gr.Spec = sourcev1.GitRepositorySpec{
			URL:       repoURL,
			Interval:  metav1.Duration{Duration: 10 * time.Second},
			Timeout:   &metav1.Duration{Duration: 30 * time.Second},
			Reference: &sourcev1.GitRepositoryRef{Branch: fluxenv.DefaultBranch},
		}
	})
	if err != nil {
		return nil, nil, err
	}
	fmt.Printf("demo: GitRepository %s/%s %s (%s, branch %s, polled every 10s)\n", namespace, repoName, res, repoURL, fluxenv.DefaultBranch)

	ka := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: appName, Namespace: namespace}}
	res, err = d.upsert(ka, func() {
		ka.Spec = d.kclArtifactSpec(sourcev1.GitRepositoryKind, repoName, "", env)
		ka.Spec.Arguments["replicas"] = replicas
	})
	if err != nil {
		return nil, nil, err
	}
	fmt.Printf("demo: KCLArtifact %s/%s %s (the root of %s.git = fixtures/%s, arguments env=%s replicas=%s)\n",
		namespace, appName, res, repoName, repoName, env, replicas)
	return gr, ka, nil
}

// waitRendered waits until the GitRepository has an artifact and the KCLArtifact rendered it.
func (d *demo) waitRendered(gr *sourcev1.GitRepository, ka *kclv1.KCLArtifact) error {
	if err := d.wait("GitRepository "+namespace+"/"+repoName+" Ready", sourceController, func(ctx context.Context) (bool, string, error) {
		if err := d.c.Get(ctx, client.ObjectKeyFromObject(gr), gr); err != nil {
			return false, "", err
		}
		s := readyState(gr.Status.Conditions, gr.Generation, gr.Status.ObservedGeneration)
		if gr.Status.Artifact == nil || !ready(gr.Status.Conditions, gr.Generation, gr.Status.ObservedGeneration) {
			return false, s, nil
		}
		return true, "revision " + gr.Status.Artifact.Revision, nil
	}); err != nil {
		return err
	}

	if err := d.wait("KCLArtifact "+namespace+"/"+appName+" Ready", kclController, func(ctx context.Context) (bool, string, error) {
		if err := d.c.Get(ctx, client.ObjectKeyFromObject(gr), gr); err != nil {
			return false, "", err
		}
		if err := d.c.Get(ctx, client.ObjectKeyFromObject(ka), ka); err != nil {
			return false, "", err
		}
		s := readyState(ka.Status.Conditions, ka.Generation, ka.Status.ObservedGeneration)
		if ka.Status.Artifact == nil || !ready(ka.Status.Conditions, ka.Generation, ka.Status.ObservedGeneration) {
			return false, s, nil
		}
		if gr.Status.Artifact != nil && ka.Status.SourceRevision != gr.Status.Artifact.Revision {
			return false, fmt.Sprintf("%s; rendered source revision %s, the GitRepository is at %s", s,
				ka.Status.SourceRevision, gr.Status.Artifact.Revision), nil
		}
		return true, fmt.Sprintf("artifact %s from %s", ka.Status.Artifact.Revision, ka.Status.SourceRevision), nil
	}); err != nil {
		return err
	}
	return nil
}

// waitMainApplied waits until the generated Kustomization applied the artifact and the rendered
// objects exist; it returns the Kustomization and the objects found.
func (d *demo) waitMainApplied(ka *kclv1.KCLArtifact) (*kustomizev1.Kustomization, []string, error) {
	ks, err := d.waitKustomization(ka)
	if err != nil {
		return nil, nil, err
	}
	applied, err := d.waitObjects(ka)
	return ks, applied, err
}

// waitKustomization waits until the generated Kustomization applied the KCLArtifact's artifact.
func (d *demo) waitKustomization(ka *kclv1.KCLArtifact) (*kustomizev1.Kustomization, error) {
	ks := &kustomizev1.Kustomization{}
	ksName := "the generated Kustomization"
	if r := ka.Status.KustomizationRef; r != nil {
		ksName = "Kustomization " + r.Namespace + "/" + r.Name
	}
	if err := d.wait(ksName+" Ready", kustomizeController, func(ctx context.Context) (bool, string, error) {
		if err := d.c.Get(ctx, client.ObjectKeyFromObject(ka), ka); err != nil {
			return false, "", err
		}
		r := ka.Status.KustomizationRef
		if r == nil {
			return false, "KCLArtifact status.kustomizationRef not set", nil
		}
		if err := d.c.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: r.Name}, ks); err != nil {
			return false, "", err
		}
		s := readyState(ks.Status.Conditions, ks.Generation, ks.Status.ObservedGeneration)
		if !ready(ks.Status.Conditions, ks.Generation, ks.Status.ObservedGeneration) {
			return false, s, nil
		}
		if ka.Status.Artifact != nil && ks.Status.LastAppliedRevision != ka.Status.Artifact.Revision {
			return false, fmt.Sprintf("%s; last applied revision %q, the KCLArtifact's artifact is %s", s,
				ks.Status.LastAppliedRevision, ka.Status.Artifact.Revision), nil
		}
		c := apimeta.FindStatusCondition(ks.Status.Conditions, meta.ReadyCondition)
		return true, c.Message, nil
	}); err != nil {
		return nil, err
	}
	return ks, nil
}

// waitObjects waits until the rendered objects of the KCLArtifact's inventory exist, and
// describes them.
func (d *demo) waitObjects(ka *kclv1.KCLArtifact) ([]string, error) {
	var applied []string
	if err := d.wait("the rendered ConfigMap, Deployment and Service in namespace "+namespace, kustomizeController, func(ctx context.Context) (bool, string, error) {
		if err := d.c.Get(ctx, client.ObjectKeyFromObject(ka), ka); err != nil {
			return false, "", err
		}
		kinds := map[string]bool{}
		var found, missing []string
		for _, ref := range ka.Status.Inventory {
			kinds[ref.Kind] = true
			ns := ref.Namespace
			if ns == "" {
				ns = namespace // the Kustomization's targetNamespace
			}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind))
			desc := ref.Kind + " " + ns + "/" + ref.Name
			if err := d.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, u); err != nil {
				if apierrors.IsNotFound(err) {
					missing = append(missing, desc)
					continue
				}
				return false, "", fmt.Errorf("%s: %w", desc, err)
			}
			if n, ok, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); ok {
				desc += fmt.Sprintf(" (%d replicas)", n)
			}
			found = append(found, desc)
		}
		for _, k := range []string{"ConfigMap", "Deployment", "Service"} {
			if !kinds[k] {
				missing = append(missing, "a "+k+" in the KCLArtifact's status.inventory")
			}
		}
		if len(missing) > 0 {
			return false, "missing: " + strings.Join(missing, ", "), nil
		}
		applied = found
		return true, strings.Join(found, ", "), nil
	}); err != nil {
		return nil, err
	}

	return applied, nil
}

// fetchRendered downloads the artifact and the YAML view from the artifact server.
func (d *demo) fetchRendered(o *outcome) error {
	ka := o.ka
	artifactURL := ka.Status.Artifact.URL
	yamlURL := d.serverURL(ka, "latest.yaml")
	if _, err := d.fetch(artifactURL); err != nil {
		return err
	}
	rendered, err := d.fetch(yamlURL)
	if err != nil {
		return err
	}
	o.artifactURL, o.yamlURL, o.rendered = artifactURL, yamlURL, rendered
	return nil
}

// show prints where everything is and how to look at and change it.
func (d *demo) show(o *outcome) {
	ka, ks, applied, others, diff := o.ka, o.ks, o.applied, o.others, o.diff
	artifactURL, yamlURL, rendered := o.artifactURL, o.yamlURL, o.rendered
	kubectlNote := ""
	if _, err := exec.LookPath("kubectl"); err != nil {
		kubectlNote = "  (kubectl is not installed here: any recent kubectl works)\n"
	}
	ea := "(none)"
	if r := ka.Status.ExternalArtifactRef; r != nil {
		ea = r.Namespace + "/" + r.Name
	}
	fmt.Printf(`
The demo runs: KCLArtifact %[1]s/%[2]s renders %[3]s.git (fixtures/%[3]s) into ExternalArtifact %[4]s,
and Kustomization %[1]s/%[5]s applied %[6]s.

  artifact (status.artifact.url):  %[7]s
  rendered YAML (stable URL):      %[8]s

$ curl -s %[8]s
%[9]s
Look at everything:

  export KUBECONFIG=%[10]s
%[11]s  kubectl -n %[1]s get gitrepositories,kclartifacts,externalartifacts,kustomizations
  kubectl -n %[1]s get deploy,svc,cm
  kubectl -n %[1]s describe kclartifact %[2]s

  # or with the flux CLI and its plugin (make fluxcli flux-plugin; docs/operations.md "Day 2"):
  PATH=$PWD/bin/flux-cli:$PATH flux kcl get -n %[1]s
  PATH=$PWD/bin/flux-cli:$PATH flux kcl tree %[2]s -n %[1]s

Change it (the KCLArtifact renders again, the Kustomization applies the result; curl the YAML URL again):

  kubectl -n %[1]s patch kclartifact %[2]s --type merge -p '{"spec":{"arguments":{"replicas":"3"}}}'

  # or commit to the Git repository (the GitRepository polls it every 10s):
  cd "$(mktemp -d)" && git clone -q %[12]s . && sed -i 's/Hello from/Hi from/' main.k &&
    git -c user.name=demo -c user.email=demo@example.invalid commit -qam 'new greeting' && git push -q

%[18]s
The demo changed one of them (KCLArtifact %[1]s/%[19]s, replicas=2); what changed, object by object
(the artifact server's /diff: the latest artifact against the previous one):

$ curl -s %[20]s
%[21]s
Browse the artifacts, their history and diffs: %[22]s/
After your own change: curl -s %[23]s

%[24]s
Logs: %[13]s/ (%[14]s.log, %[15]s.log, %[16]s.log), %[17]s
Stop it: make demo-down
`, namespace, appName, repoName, ea, ks.Name, strings.Join(applied, ", "),
		artifactURL, yamlURL, withNewline(rendered),
		d.st.Kubeconfig, kubectlNote, d.st.Repositories[repoName],
		d.p.Rel(d.st.LogDir), kclController, sourceController, kustomizeController, d.p.Rel(d.p.SupervisorLog),
		otherSourcesText(others), others[0].name,
		others[0].diffURL, withNewline(diff),
		d.st.KCLController.UIURL, d.serverURL(ka, "diff"), d.deliveryText(o.delivery))
}

// serverURL is the artifact server's URL of file (latest.yaml, diff) of KCLArtifact ka, with
// the token its status.artifact.url carries: the server answers nothing without it.
func (d *demo) serverURL(ka *kclv1.KCLArtifact, file string) string {
	u := fmt.Sprintf("%s/kclartifact/%s/%s/%s", d.st.KCLController.ArtifactURL, ka.Namespace, ka.Name, file)
	if ka.Status.Artifact != nil {
		u += "?" + artifactstore.TokenParam + "=" + artifactstore.TokenOf(ka.Status.Artifact.URL)
	}
	return u
}

// kclArtifactSpec renders the demo program from the named source with env.
func (d *demo) kclArtifactSpec(kind, source, path, env string) kclv1.KCLArtifactSpec {
	prune := true
	return kclv1.KCLArtifactSpec{
		SourceRef: kclv1.SourceReference{Kind: kind, Name: source},
		Path:      path,
		Interval:  metav1.Duration{Duration: time.Minute},
		Arguments: map[string]string{"env": env},
		Kustomization: &kclv1.KustomizationTemplate{
			// no kubelet runs here: a Deployment never becomes available, so no health checks
			// (without wait and healthChecks, kustomize-controller checks nothing)
			Wait:    false,
			Prune:   &prune,
			Timeout: &metav1.Duration{Duration: time.Minute},
			// the rendered objects have no namespace
			TargetNamespace: namespace,
		},
	}
}

func conditionTrue(conds []metav1.Condition, t string) bool {
	return apimeta.IsStatusConditionTrue(conds, t)
}

// upsert creates obj (setSpec fills it in) or sets the spec of the existing one back to the
// demo's; the result says which, and whether the spec changed (the generation moved).
func (d *demo) upsert(obj client.Object, setSpec func()) (string, error) {
	key := client.ObjectKeyFromObject(obj)
	kind := fmt.Sprintf("%T", obj)
	if gvk, err := apiutilGVK(d.c, obj); err == nil {
		kind = gvk
	}
	var result string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := d.c.Get(d.ctx, key, obj); err != nil {
			if !apierrors.IsNotFound(err) {
				return err
			}
			setSpec()
			result = "created"
			return d.c.Create(d.ctx, obj)
		}
		gen := obj.GetGeneration()
		setSpec()
		if err := d.c.Update(d.ctx, obj); err != nil {
			return err
		}
		if obj.GetGeneration() == gen {
			result = "exists, unchanged"
		} else {
			result = fmt.Sprintf("exists, spec set back to the demo's (generation %d -> %d)", gen, obj.GetGeneration())
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("applying %s %s: %w", kind, key, err)
	}
	return result, nil
}

func apiutilGVK(c client.Client, obj client.Object) (string, error) {
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return "", err
	}
	return gvk.Kind, nil
}

// wait waits for cond with fluxenv.WaitFor, printing how long it took, and fails early, with the
// controller's log, when the controller responsible has exited.
func (d *demo) wait(what, controller string, cond func(ctx context.Context) (bool, string, error)) error {
	start := time.Now()
	var done, dead string
	err := fluxenv.WaitFor(d.ctx, d.timeout, what, func(ctx context.Context) (bool, string, error) {
		for _, pr := range d.st.Processes {
			if pr.Name == controller && !pr.Alive() {
				dead = fmt.Sprintf("%s (pid %d) exited while waiting for %s", controller, pr.PID, what)
				return true, "", nil
			}
		}
		ok, state, err := cond(ctx)
		done = state
		return ok, state, err
	})
	switch {
	case d.ctx.Err() != nil:
		return fmt.Errorf("interrupted while waiting for %s", what)
	case dead != "":
		return d.failure(dead, controller)
	case err != nil:
		return d.failure(err.Error(), controller)
	}
	fmt.Printf("demo: %s in %s: %s\n", what, time.Since(start).Round(100*time.Millisecond), done)
	return nil
}

func (d *demo) failure(msg, controller string) error {
	logPath := filepath.Join(d.st.LogDir, controller+".log")
	return fmt.Errorf("%s\n--- last %d lines of %s:\n%s\n--- (all logs: %s/, %s)", msg, logLines, d.p.Rel(logPath),
		fluxenv.Tail(logPath, logLines), d.p.Rel(d.st.LogDir), d.p.Rel(d.p.SupervisorLog))
}

// fetch GETs url from the controller's artifact server (on 127.0.0.1: no proxy), retrying for a
// few seconds, and returns the body of a 200 answer.
func (d *demo) fetch(url string) (string, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for {
		req, err := http.NewRequestWithContext(d.ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && rerr == nil {
				return string(body), nil
			}
			last = fmt.Sprintf("%s %s", resp.Status, strings.TrimSpace(string(body)))
			if rerr != nil {
				last = rerr.Error()
			}
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) || d.ctx.Err() != nil {
			return "", d.failure(fmt.Sprintf("GET %s: %s", url, last), kclController)
		}
		select {
		case <-d.ctx.Done():
		case <-time.After(500 * time.Millisecond): // retry interval
		}
	}
}

func ready(conds []metav1.Condition, generation, observed int64) bool {
	return observed == generation && apimeta.IsStatusConditionTrue(conds, meta.ReadyCondition)
}

// readyState describes the Ready condition and how far the controller got.
func readyState(conds []metav1.Condition, generation, observed int64) string {
	gen := fmt.Sprintf("generation %d, observed %d", generation, observed)
	c := apimeta.FindStatusCondition(conds, meta.ReadyCondition)
	if c == nil {
		return "no Ready condition yet (" + gen + ")"
	}
	others := []string{}
	for _, o := range conds {
		if o.Type != meta.ReadyCondition {
			others = append(others, o.Type+"="+string(o.Status))
		}
	}
	sort.Strings(others)
	s := fmt.Sprintf("Ready=%s %s: %s (%s", c.Status, c.Reason, c.Message, gen)
	if len(others) > 0 {
		s += "; " + strings.Join(others, " ")
	}
	return s + ")"
}

func withNewline(s string) string {
	if strings.HasSuffix(s, "\n") {
		return s
	}
	return s + "\n"
}
