package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	imagev1 "github.com/fluxcd/image-reflector-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fluxkcl"
	"github.com/kcl-flux/kcl-artifact-controller/test/cmd/devcluster/devstate"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// The delivery part of the demo: in namespace delivery, one GitRepository (demo.git), one
// ImagePolicy selecting the newest tag of the dev cluster's registry, and three stages of the
// demo program. dev renders every tag at once, staging what dev ran healthy for the soak,
// production what staging ran healthy, once a person approved it.
const (
	deliveryNS  = "delivery"
	imageRepo   = deliveryNS + "/podinfo"
	policyName  = "podinfo" // its arguments are podinfo.image and podinfo.tag
	stagingSoak = 20 * time.Second
	// dev's checks, with the dev cluster's Prometheus: the share of requests answered 500 over the
	// last 5 s, checked every second for verifyFor
	errorRate = `sum(rate(demo_app_requests_total{code="500"}[5s])) / sum(rate(demo_app_requests_total[5s]))`
	verifyFor = 10 * time.Second
	badRatio  = "0.5"
)

// stage is one KCLArtifact of the pipeline.
type stage struct {
	name, env string
	from      string        // the upstream stage, "" for dev
	soak      time.Duration // of the upstream's health
	approval  bool
}

var stages = []stage{
	{name: "podinfo-dev", env: "dev"},
	{name: "podinfo-staging", env: "staging", from: "podinfo-dev", soak: stagingSoak},
	{name: "podinfo-prod", env: "prod", from: "podinfo-staging", approval: true},
}

// deliveryOutcome is what the demo shows of the pipeline.
type deliveryOutcome struct {
	tag                  string
	toDev, toStaging     time.Duration // from the push
	devDigest, waiting   string        // dev's published artifact, production's waiting one
	stageTable, pageURL  string
	approvalGateMessage  string
	stagingSoakedMessage string
	devVerified          string
	bad                  *badOutcome
}

// runDelivery pushes the next image tag and follows it through the pipeline until production
// waits for an approval; with the dev cluster's Prometheus, it then pushes a bad release and
// follows it until dev rolled it back.
func (d *demo) runDelivery() (*deliveryOutcome, error) {
	if d.st.Ports.ImageReflectorHealth == 0 {
		why := d.st.ImageReflectorMissing
		if why == "" {
			why = "this dev cluster was started without it"
		}
		return nil, fmt.Errorf("image-reflector-controller does not run (%s): `make demo-down`, `make testbin` and `make demo`", why)
	}
	reg := &fluxenv.Registry{Host: fmt.Sprintf("127.0.0.1:%d", d.st.Ports.Registry)}
	tag, err := nextTag(d.ctx, reg)
	if err != nil {
		return nil, err
	}
	pushed, err := d.pushTag(reg, tag, "")
	if err != nil {
		return nil, err
	}
	if err := d.applyDelivery(reg); err != nil {
		return nil, err
	}
	o := &deliveryOutcome{tag: tag}
	if err := d.followRelease(o, pushed); err != nil {
		return nil, err
	}
	if d.st.Metrics != nil {
		if o.bad, err = d.badRelease(reg, o); err != nil {
			return nil, err
		}
	}
	if o.stageTable, err = d.stageTable(); err != nil {
		return nil, err
	}
	o.pageURL = d.st.KCLController.UIURL + "/kclartifact/" + deliveryNS + "/" + stages[2].name + "/"
	page, err := d.fetch(o.pageURL)
	if err != nil {
		return nil, err
	}
	for _, s := range stages {
		if !strings.Contains(page, s.name) {
			return nil, fmt.Errorf("the browser view %s draws no stage %s in the pipeline", o.pageURL, s.name)
		}
	}
	return o, nil
}

// pushTag pushes tag to the demo's image repository, with the share of requests the exporter
// plays it answering 500 when errorRatio is set, and asks image-reflector-controller to scan now
// rather than at its interval (once the ImageRepository exists).
func (d *demo) pushTag(reg *fluxenv.Registry, tag, errorRatio string) (time.Time, error) {
	var labels map[string]string
	if errorRatio != "" {
		labels = map[string]string{devstate.ErrorRatioLabel: errorRatio}
	}
	if _, err := reg.PushImage(d.ctx, imageRepo, tag, labels); err != nil {
		return time.Time{}, err
	}
	pushed := time.Now()
	fmt.Printf("demo: image %s:%s pushed to the dev cluster's registry (no commit)\n", reg.Image(imageRepo), tag)
	ir := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: policyName, Namespace: deliveryNS}}
	now := time.Now().Format(time.RFC3339Nano)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, meta.ReconcileRequestAnnotation, now)
	err := d.c.Patch(d.ctx, ir, client.RawPatch(types.MergePatchType, []byte(patch)))
	if err != nil && !apierrors.IsNotFound(err) {
		return time.Time{}, fmt.Errorf("asking ImageRepository %s/%s to scan: %w", deliveryNS, policyName, err)
	}
	return pushed, nil
}

// followRelease waits until dev and staging published o.tag and production waits for an
// approval of it.
func (d *demo) followRelease(o *deliveryOutcome, pushed time.Time) error {
	dev, err := d.waitPublished(stages[0], o.tag)
	if err != nil {
		return err
	}
	o.toDev, o.devDigest = time.Since(pushed), dev.Status.Artifact.Digest
	if v := dev.Status.History[0].Verification; v != nil {
		o.devVerified = "; " + checksText(v)
	}
	staging, err := d.waitPublished(stages[1], o.tag)
	if err != nil {
		return err
	}
	o.toStaging = time.Since(pushed)
	if p := staging.Status.History[0].Promotion; p != nil && p.HealthySince != nil {
		o.stagingSoakedMessage = fmt.Sprintf("%s healthy since %s, soaked %s", p.Upstream, p.HealthySince.Format(time.TimeOnly), stagingSoak)
	}
	return d.waitApproval(o)
}

// nextTag is 1.<n>.0 for the n tags the repository holds: each run of the demo pushes a newer
// one, which the semver policy selects.
func nextTag(ctx context.Context, reg *fluxenv.Registry) (string, error) {
	tags, err := crane.ListTags(reg.Image(imageRepo), crane.Insecure, crane.WithContext(ctx))
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode == 404 {
		tags, err = nil, nil
	}
	if err != nil {
		return "", fmt.Errorf("listing the tags of %s: %w", reg.Image(imageRepo), err)
	}
	return fmt.Sprintf("1.%d.0", len(tags)), nil
}

// applyDelivery creates the namespace, the sources and the stages, or sets them back to the
// demo's.
func (d *demo) applyDelivery(reg *fluxenv.Registry) error {
	if err := d.ensureNamespace(deliveryNS); err != nil {
		return err
	}
	gr := &sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Name: repoName, Namespace: deliveryNS}}
	if _, err := d.upsert(gr, func() {
		gr.Spec = sourcev1.GitRepositorySpec{URL: d.st.Repositories[repoName], Interval: metav1.Duration{Duration: 10 * time.Second},
			Timeout: &metav1.Duration{Duration: 30 * time.Second}, Reference: &sourcev1.GitRepositoryRef{Branch: fluxenv.DefaultBranch}}
	}); err != nil {
		return err
	}
	ir := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: policyName, Namespace: deliveryNS}}
	if _, err := d.upsert(ir, func() {
		ir.Spec = imagev1.ImageRepositorySpec{Image: reg.Image(imageRepo), Interval: metav1.Duration{Duration: time.Minute}, Insecure: true}
	}); err != nil {
		return err
	}
	ip := &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: policyName, Namespace: deliveryNS}}
	if _, err := d.upsert(ip, func() {
		ip.Spec = imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: policyName},
			Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}}}
	}); err != nil {
		return err
	}
	for _, s := range stages {
		ka := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: deliveryNS}}
		res, err := d.upsert(ka, func() { ka.Spec = d.stageSpec(s) })
		if err != nil {
			return err
		}
		fmt.Printf("demo: KCLArtifact %s/%s %s (%s)\n", deliveryNS, s.name, res, s.describe())
	}
	return nil
}

func (s stage) describe() string {
	if s.from == "" {
		return "env=" + s.env + ", every tag the ImagePolicy selects"
	}
	gates := "what " + s.from + " ran healthy"
	if s.soak > 0 {
		gates += " for " + s.soak.String()
	}
	if s.approval {
		gates += ", once approved"
	}
	return "env=" + s.env + ", " + gates
}

// stageSpec is the demo program's spec with the ImagePolicy's arguments and the stage's gates.
func (d *demo) stageSpec(s stage) kclv1.KCLArtifactSpec {
	spec := d.kclArtifactSpec(sourcev1.GitRepositoryKind, repoName, "", s.env)
	spec.Kustomization.TargetNamespace = deliveryNS
	spec.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "ImagePolicy", Name: policyName}}
	// a failed or rejected release is rolled back to the stage's previous healthy one
	spec.Remediation = &kclv1.Remediation{Strategy: kclv1.RollbackStrategy}
	if s.from == "" && d.st.Metrics != nil {
		spec.Verify = &kclv1.Verify{Interval: &metav1.Duration{Duration: time.Second}, Duration: metav1.Duration{Duration: verifyFor},
			FailureLimit: 2, Checks: []kclv1.VerifyCheck{{Name: "error-rate", Condition: "value < 0.1",
				Prometheus: kclv1.PrometheusQuery{Address: d.st.Metrics.PrometheusURL, Query: errorRate}}}}
	}
	if s.from != "" {
		spec.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: s.from}}
		if s.soak > 0 {
			spec.Promotion.Soak = &metav1.Duration{Duration: s.soak}
		}
		if s.approval {
			spec.Promotion.Approval = kclv1.ApprovalRequired
		}
	}
	return spec
}

// ensureNamespace creates namespace name unless it exists.
func (d *demo) ensureNamespace(name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	err := d.c.Get(d.ctx, client.ObjectKeyFromObject(ns), ns)
	switch {
	case apierrors.IsNotFound(err):
		if err := d.c.Create(d.ctx, ns); err != nil {
			return fmt.Errorf("creating namespace %s: %w", name, err)
		}
		fmt.Printf("demo: namespace %s created\n", name)
	case err != nil:
		return fmt.Errorf("namespace %s: %w", name, err)
	default:
		fmt.Printf("demo: namespace %s exists\n", name)
	}
	return nil
}

// waitPublished waits until stage s published an artifact of tag and kustomize-controller
// applied it: the health the next stage's gates read.
func (d *demo) waitPublished(s stage, tag string) (*kclv1.KCLArtifact, error) {
	ka := &kclv1.KCLArtifact{}
	what := fmt.Sprintf("KCLArtifact %s/%s publishing tag %s, applied", deliveryNS, s.name, tag)
	err := d.wait(what, kclController, func(ctx context.Context) (bool, string, error) {
		if err := d.c.Get(ctx, client.ObjectKey{Namespace: deliveryNS, Name: s.name}, ka); err != nil {
			return false, "", err
		}
		state := readyState(ka.Status.Conditions, ka.Generation, ka.Status.ObservedGeneration)
		if len(ka.Status.History) == 0 {
			return false, state + "; " + waitingState(ka), nil
		}
		e := ka.Status.History[0]
		got := inputValue(e.Inputs, policyName+".tag")
		if got != tag || e.Health != kclv1.HealthHealthy {
			return false, fmt.Sprintf("publishes tag %q (%s); %s; %s", got, e.Health, state, waitingState(ka)), nil
		}
		if ka.Spec.Verify != nil && (e.Verification == nil || e.Verification.Result != kclv1.VerificationPassed) {
			return false, "healthy, verifying: " + checksText(e.Verification), nil
		}
		return true, fmt.Sprintf("%s, image %s", e.Revision, inputValue(e.Inputs, policyName+".image")), nil
	})
	return ka, err
}

// waitApproval waits until production rendered the tag ahead and waits only for its approval.
func (d *demo) waitApproval(o *deliveryOutcome) error {
	s := stages[2]
	ka := &kclv1.KCLArtifact{}
	return d.wait(fmt.Sprintf("KCLArtifact %s/%s waiting for an approval of tag %s", deliveryNS, s.name, o.tag), kclController,
		func(ctx context.Context) (bool, string, error) {
			if err := d.c.Get(ctx, client.ObjectKey{Namespace: deliveryNS, Name: s.name}, ka); err != nil {
				return false, "", err
			}
			p := ka.Status.Promotion
			if p == nil || len(p.Waiting) == 0 {
				return false, "nothing waiting; " + readyState(ka.Status.Conditions, ka.Generation, ka.Status.ObservedGeneration), nil
			}
			w := p.Waiting[0]
			if got := inputValue(w.Inputs, policyName+".tag"); got != o.tag {
				return false, fmt.Sprintf("waiting: tag %q; %s", got, waitingState(ka)), nil
			}
			approval := false
			for _, g := range w.Gates {
				if open := g.Name != kclv1.GateApproval; g.Open != open {
					return false, waitingState(ka), nil
				}
				approval = approval || g.Name == kclv1.GateApproval
			}
			if !approval {
				return false, waitingState(ka), nil
			}
			o.waiting = w.Digest
			for _, g := range w.Gates {
				if g.Name == kclv1.GateApproval {
					o.approvalGateMessage = g.Message
				}
			}
			return true, "gate approval: " + o.approvalGateMessage, nil
		})
}

// waitingState describes the gates of the newest artifact a stage holds back.
func waitingState(ka *kclv1.KCLArtifact) string {
	p := ka.Status.Promotion
	if p == nil || len(p.Waiting) == 0 {
		return "nothing waiting"
	}
	var gates []string
	for _, g := range p.Waiting[0].Gates {
		state := "closed"
		if g.Open {
			state = "open"
		}
		gates = append(gates, g.Name+" "+state)
	}
	return "waiting: " + strings.Join(gates, ", ")
}

func inputValue(inputs []kclv1.InputValue, name string) string {
	for _, in := range inputs {
		if in.Name == name {
			return in.Value
		}
	}
	return ""
}

// stageTable is `flux kcl get -n delivery`, run in this process with the dev cluster's
// kubeconfig.
func (d *demo) stageTable() (string, error) {
	out, errOut := &strings.Builder{}, &strings.Builder{}
	if code := fluxkcl.Main([]string{"get", "-n", deliveryNS, "--kubeconfig", d.st.Kubeconfig}, out, errOut); code != 0 {
		return "", fmt.Errorf("flux kcl get -n %s: exit %d: %s", deliveryNS, code, errOut.String())
	}
	return out.String(), nil
}

// deliveryText is the closing text's section on the pipeline.
func (d *demo) deliveryText(o *deliveryOutcome) string {
	plugin, flux := d.pluginCommand()
	return fmt.Sprintf(`Delivery: namespace %[1]s is a pipeline of three stages of the same program,
podinfo-dev -> podinfo-staging (soak %[2]s) -> podinfo-prod (approval), and one ImagePolicy.
Tag %[3]s was pushed to the registry, with no commit; after the push:

  %-8[4]s podinfo-dev rendered and applied it (the ImagePolicy selected it)%[15]s
  %-8[5]s podinfo-staging published it (%[6]s)
  now      podinfo-prod rendered it ahead and waits: %[7]s
  (no kubelet runs here: healthy means applied; make demo-node shows real Pods)
%[16]s
$ flux kcl get -n %[1]s
%[8]s
The pipeline in the browser: %[9]s

  export KUBECONFIG=%[10]s
  %[11]s
  # approve production (the digest of the artifact it waits with)
  %[12]s approve podinfo-prod %[13]s -n %[1]s
  # mark dev's release bad: no stage promotes it again; a stage running it rolls back
  # to its previous healthy artifact
  %[12]s reject podinfo-dev %[14]s --reason 'bad release' -n %[1]s
  # stop every promotion of the namespace (rollbacks still happen), and resume
  %[12]s stop-line --reason 'incident' -n %[1]s
  %[12]s resume-line -n %[1]s
  # a new tag: run make demo again; it pushes the next one and follows it to production's gate
`, deliveryNS, stagingSoak, o.tag, o.toDev.Round(100*time.Millisecond).String(), o.toStaging.Round(100*time.Millisecond).String(),
		o.stagingSoakedMessage, o.approvalGateMessage, withNewline(o.stageTable), o.pageURL, d.st.Kubeconfig, plugin, flux,
		o.waiting, o.devDigest, o.devVerified, badText(o.bad)+d.noMetricsText())
}

// noMetricsText says how to see verification when the dev cluster runs without Prometheus.
func (d *demo) noMetricsText() string {
	if d.st.Metrics != nil {
		return ""
	}
	return "\nVerification by metrics (a bad release rolled back by its error rate) needs Prometheus: make prometheus\n" +
		"(about 8 minutes, once), make demo-down and make demo. Now: " + d.st.MetricsMissing + "\n"
}

// pluginCommand is how to run `flux kcl` here: through flux when bin/flux-cli/flux exists and
// the plugin is installed where flux finds it (make flux-plugin), else the plugin alone.
func (d *demo) pluginCommand() (setup, command string) {
	dir := os.Getenv("FLUXCD_PLUGINS")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".fluxcd", "plugins")
	}
	_, errFlux := os.Stat(filepath.Join(d.p.Root, "bin", "flux-cli", "flux"))
	_, errPlugin := os.Stat(filepath.Join(dir, "flux-kcl"))
	if errFlux == nil && errPlugin == nil {
		return "export PATH=$PWD/bin/flux-cli:$PATH   # flux, which finds its kcl plugin in " + dir, "flux kcl"
	}
	return "# the plugin alone, as `flux kcl` runs it (make fluxcli flux-plugin for flux kcl)", "go run ./cmd/flux-kcl"
}
