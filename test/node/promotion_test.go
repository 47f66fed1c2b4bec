package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	imagev1 "github.com/fluxcd/image-reflector-controller/api/v1"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

const (
	// promotionSoak is every stage's spec.promotion.soak.
	promotionSoak = 20 * time.Second
	// promotionWindow opens production's window every two minutes for one (UTC): the test
	// computes from it when the window is open, it assumes nothing of the clock.
	promotionWindow         = "*/2 * * * *"
	promotionWindowDuration = time.Minute
	// promotionGateMetric is the histogram of the time from a stage's render of an artifact to
	// each of its gates opening, observed when it is published.
	promotionGateMetric = "kcl_artifact_controller_promotion_gate_wait_seconds"
)

// stage is one environment of the demo application: a KCLArtifact of the test's namespace
// applying to a namespace of its own, with its own arguments.
type stage struct {
	name, target, message string
	replicas              int
	upstream              string // "" for the first stage
}

// promotion is the state of TestPromotionThroughThreeStages.
type promotion struct {
	ns     string
	stages []stage
	tags   *tagRun
	app    v1.Image
	// serving is each stage's history entry it serves, as last checked
	serving map[string]kclv1.ArtifactHistoryEntry
}

// TestPromotionThroughThreeStages: dev, staging and production of the demo application are
// three KCLArtifacts on one GitRepository and one ImagePolicy, each with its own replicas and
// message, applying to a namespace of its own; staging follows dev and production follows
// staging, each with soak: 20s; dev has spec.remediation. A first deploy and then a good commit
// flow through all three, each stage publishing only once the one before has run the same
// inputs Healthy for 20 s (from the history's own times), each rendered once (ahead) and not
// again while waiting. An image tag that cannot start fails in dev and is rolled back there:
// staging and production render it ahead, never publish it (staging says UpstreamFailed) and keep
// serving the artifact before. With approval: Required and a window every two minutes for one,
// production holds the next tag through an open window until `flux kcl approve`, then through
// the closed window until it opens, and publishes it in the window.
func TestPromotionThroughThreeStages(t *testing.T) {
	ns := newNamespace(t, "promotion")
	p := &promotion{ns: ns, serving: map[string]kclv1.ArtifactHistoryEntry{}, stages: []stage{
		{name: "dev", target: "promotion-dev", message: "dev", replicas: 1},
		{name: "staging", target: "promotion-staging", message: "staging", replicas: 2, upstream: "dev"},
		{name: "production", target: "promotion-production", message: "production", replicas: 3, upstream: "staging"},
	}}
	for _, s := range p.stages {
		targetNamespace(t, s.target, ns)
	}
	ircRunsAsPod(t)
	reg := startNodeRegistry(t)
	p.app = demoAppImage(t)
	shaA := createImageRepo(t, ns, "promotion")
	ir := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: imagev1.ImageRepositorySpec{Image: reg.image(), Insecure: true, Interval: metav1.Duration{Duration: scanInterval}}}
	create(t, ir)
	create(t, &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: imagev1.ImagePolicySpec{
			ImageRepositoryRef:     meta.NamespacedObjectReference{Name: ir.Name},
			Policy:                 imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}},
			DigestReflectionPolicy: imagev1.ReflectIfNotPresent,
		}})
	for _, s := range p.stages {
		create(t, stageArtifact(ns, s))
	}
	p.tags = &tagRun{ns: ns, reg: reg, ir: ir}

	if !t.Run("a first deploy flows through the three stages", func(t *testing.T) {
		renders := p.renders(t)
		image, digest := p.tags.pushAndSelect(t, tagged(t, p.app, "1.0.0"), "1.0.0")
		p.flow(t, gitRevision(shaA), "1.0.0", image, digest, "first deploy", p.stages)
		p.checkRenders(t, renders, "first deploy")
	}) {
		return
	}

	var shaB string
	if !t.Run("a good commit flows through the three stages", func(t *testing.T) {
		renders := p.renders(t)
		shaB = commitProgramChange(t, "b")
		p.flow(t, gitRevision(shaB), "1.0.0", p.image("dev"), input(p.serving["dev"], "web.digest"), "good commit", p.stages)
		p.checkRenders(t, renders, "good commit")
	}) {
		return
	}

	if !t.Run("a tag that cannot start fails in dev and reaches neither staging nor production", func(t *testing.T) {
		p.badTag(t, gitRevision(shaB), "1.1.0")
	}) {
		return
	}

	t.Run("production waits for flux kcl approve, then for its window", func(t *testing.T) {
		p.approvalAndWindow(t, gitRevision(shaB), "1.2.0")
	})
}

// stageArtifact is the KCLArtifact of a stage: the demo program of the Git repository promotion,
// its image from the ImagePolicy web, its replicas and message from spec.arguments, applied into
// the stage's namespace and waited for.
func stageArtifact(ns string, s stage) *kclv1.KCLArtifact {
	return kclArtifact(ns, s.name, "promotion", func(o *kclv1.KCLArtifact) {
		o.Spec.Interval = metav1.Duration{Duration: rollbackInterval}
		o.Spec.Arguments = map[string]string{"replicas": strconv.Itoa(s.replicas), "message": s.message}
		o.Spec.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "ImagePolicy", Name: "web"}}
		// dev's timeout is kustomize-controller's least, so that a tag that cannot start fails
		// soon; the others roll out more replicas
		timeout := time.Minute
		if s.upstream == "" {
			timeout = 30 * time.Second
			o.Spec.Remediation = &kclv1.Remediation{Retries: 0, Strategy: kclv1.RollbackStrategy}
		} else {
			o.Spec.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: s.upstream},
				Soak: &metav1.Duration{Duration: promotionSoak}}
		}
		o.Spec.Kustomization = &kclv1.KustomizationTemplate{Wait: true, TargetNamespace: s.target,
			Timeout: &metav1.Duration{Duration: timeout}, RetryInterval: &metav1.Duration{Duration: 10 * time.Second}}
	})
}

// targetNamespace creates the namespace a stage applies to, where the account the generated
// Kustomizations of ns run as (its default one, under kustomize-controller's
// --default-service-account) may do anything.
func targetNamespace(t *testing.T, name, ns string) {
	t.Helper()
	create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	create(t, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: name, Name: ns + "-reconciler"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns}}})
}

// commitProgramChange commits a change of the program to the repository promotion: an annotation
// of the Pod template, so that every stage rolls out new Pods.
func commitProgramChange(t *testing.T, value string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(suite.repo, "fixtures", "node-app", "main.k"))
	if err != nil {
		t.Fatal(err)
	}
	program := imageProgram(t, string(data))
	const old = `metadata = {labels = _labels}`
	if strings.Count(program, old) != 1 {
		t.Fatalf("fixtures/node-app/main.k no longer has one %s (the Pod template's)", old)
	}
	program = strings.Replace(program, old, fmt.Sprintf(`metadata = {labels = _labels, annotations = {"demo/commit" = %q}}`, value), 1)
	return commit(t, "promotion", "the Pod template says commit "+value, map[string]string{"main.k": program})
}

// image is the web.image a stage's served artifact was rendered with.
func (p *promotion) image(name string) string { return input(p.serving[name], "web.image") }

// flow waits until each stage in order publishes the artifact of (sourceRevision, tag), runs it
// Healthy and answers with its message, and checks from the history's times that each stage with
// an upstream published it only once the upstream had run the same inputs Healthy for the soak,
// rendered it ahead, and records where it was proved.
func (p *promotion) flow(t *testing.T, sourceRevision, tag, image, digest, what string, stages []stage) {
	t.Helper()
	for _, s := range stages {
		e := p.waitServing(t, s.name, sourceRevision, tag)
		if s.upstream != "" {
			p.checkPromoted(t, s, e, what, time.Now())
		}
		waitPodsOn(t, s.target, image, digest)
		waitAnswers(t, s.target, s.message, "")
		p.serving[s.name] = waitStageHealth(t, p.ns, s.name, e.Digest)
	}
}

// renders is the number of renders in the test's namespace so far, all stages together.
func (p *promotion) renders(t *testing.T) int {
	t.Helper()
	pod, err := controllerPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rendersIn(t, pod, p.ns)
}

// checkRenders checks that new inputs were rendered once per stage since before (dev to
// publish them, the others ahead) and never again while they waited.
func (p *promotion) checkRenders(t *testing.T, before int, what string) {
	t.Helper()
	n := p.renders(t) - before
	figureCount("promotion: "+what+": renders beyond one per stage (waiting: expected 0)", n-len(p.stages))
	if n != len(p.stages) {
		t.Errorf("%d renders in %d stages: each renders new inputs once, and nothing while it waits", n, len(p.stages))
	}
}

// waitServing waits until the stage serves the history entry of (sourceRevision, tag), and
// returns it.
func (p *promotion) waitServing(t *testing.T, name, sourceRevision, tag string) kclv1.ArtifactHistoryEntry {
	t.Helper()
	var entry kclv1.ArtifactHistoryEntry
	waitFigure(t, name+" serving "+tag+" of "+sourceRevision, func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, p.ns, name)
		if err != nil {
			return false, "", err
		}
		for _, e := range obj.Status.History {
			if e.SourceRevision == sourceRevision && input(e, "web.tag") == tag && digestOf(obj) == e.Digest {
				entry = e
				return true, "", nil
			}
		}
		return false, kclState(obj) + " waiting " + waitingOf(obj) + " history " + historyOf(obj), nil
	})
	return entry
}

// checkPromoted checks a stage's newly published entry e against its upstream's entry of the
// same inputs: published at least the soak after that entry's healthyAt, rendered before, and
// its promotion record naming it.
func (p *promotion) checkPromoted(t *testing.T, s stage, e kclv1.ArtifactHistoryEntry, what string, seen time.Time) {
	t.Helper()
	up, err := getKCLArtifact(context.Background(), p.ns, s.upstream)
	if err != nil {
		t.Fatal(err)
	}
	u, ok := sameInputs(up, e)
	if !ok || u.HealthyAt == nil {
		t.Fatalf("%s published %s, but %s has no Healthy entry of the same inputs: %s", s.name, e.Digest, s.upstream, historyOf(up))
	}
	soaked := u.HealthyAt.Add(promotionSoak)
	// the gate opens a second later: healthyAt is kept in whole seconds, a soak is a lower bound
	opened := soaked.Add(time.Second)
	published := e.LastPublished.Time
	figure(fmt.Sprintf("promotion: %s: %s soak gate open to published (status, 1 s)", what, s.name), published.Sub(opened))
	figure(fmt.Sprintf("promotion: %s: %s soak gate open to published (seen, 100 ms)", what, s.name), seen.Sub(opened))
	if published.Before(soaked) {
		t.Errorf("%s published %s at %s, before %s had run it Healthy for %s (healthy at %s)",
			s.name, e.Digest, published.Format(time.RFC3339), s.upstream, promotionSoak, u.HealthyAt.Format(time.RFC3339))
	}
	rec := e.Promotion
	switch {
	case rec == nil:
		t.Errorf("%s's history entry %s has no promotion record", s.name, e.Digest)
	case rec.Upstream != s.upstream || rec.UpstreamRevision != u.Revision:
		t.Errorf("%s's promotion record is %+v, want upstream %s at %s", s.name, rec, s.upstream, u.Revision)
	case rec.HealthySince == nil || !rec.HealthySince.Equal(u.HealthyAt):
		t.Errorf("%s's promotion record says healthy since %v, %s's entry %v", s.name, rec.HealthySince, s.upstream, u.HealthyAt)
	case rec.RenderedAt == nil || rec.RenderedAt.After(opened):
		// rendered ahead: before the gate opened, not when it did
		t.Errorf("%s rendered %s at %v, after its soak opened at %s", s.name, e.Digest, rec.RenderedAt, opened.Format(time.RFC3339))
	}
}

// sameInputs is the upstream's history entry rendered from e's source revision with e's values
// of the ImagePolicy.
func sameInputs(up *kclv1.KCLArtifact, e kclv1.ArtifactHistoryEntry) (kclv1.ArtifactHistoryEntry, bool) {
	for _, u := range up.Status.History {
		if u.SourceRevision == e.SourceRevision && input(u, "web.image") == input(e, "web.image") {
			return u, true
		}
	}
	return kclv1.ArtifactHistoryEntry{}, false
}

// waitStageHealth waits until the stage's entry of digest is Healthy and returns it.
func waitStageHealth(t *testing.T, ns, name, digest string) kclv1.ArtifactHistoryEntry {
	t.Helper()
	var entry kclv1.ArtifactHistoryEntry
	waitFor(t, name+"'s "+digest+" Healthy", func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, name)
		if err != nil {
			return false, "", err
		}
		e, ok := historyEntry(obj, digest)
		entry = e
		return ok && e.Health == kclv1.HealthHealthy && e.HealthyAt != nil, historyOf(obj), nil
	})
	return entry
}

// badTag pushes tag, whose container cannot start: dev publishes it, fails and rolls back;
// staging and production render it ahead and never publish it.
func (p *promotion) badTag(t *testing.T, sourceRevision, tag string) {
	renders := p.renders(t)
	good := p.serving["dev"]
	p.tags.pushAndSelect(t, unstartableImage(t, tagged(t, p.app, tag)), tag)
	bad := waitTagHealth(t, p.ns, "dev", sourceRevision, tag, kclv1.HealthFailed)
	began := time.Now()
	waitFor(t, "dev rolled back", func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, p.ns, "dev")
		if err != nil {
			return false, "", err
		}
		c := conditions.Get(obj, kclv1.RemediatedCondition)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == kclv1.RolledBackReason &&
			digestOf(obj) == good.Digest, kclState(obj), nil
	})
	waitPodsOn(t, "promotion-dev", input(good, "web.image"), input(good, "web.digest"))
	figure("promotion: "+tag+" failed in dev to rolled back, Pods on the previous tag", time.Since(began))
	t.Logf("dev's %s failed: %+v", bad.Digest, bad.Failure)

	// staging saw dev fail it: closed for good
	p.waitGateClosed(t, "staging", tag, kclv1.UpstreamFailedReason)
	// production's upstream, staging, never ran it
	p.waitGateClosed(t, "production", tag, "")
	// dev's namespace admin writes the failed release into dev's status as healthy since an hour
	// (issue 53): the gates read the controller's record of dev's history, and the samples below
	// show staging and production still serving what they served
	forgeHealthy(t, p.ns, "dev", bad.Digest)
	// longer than the soak: had a gate opened, a stage would have published by then
	n := p.keepServing(t, tag, 2*promotionSoak)
	figureCount("promotion: "+tag+": samples of staging and production serving the previous artifact", n)
	publishes := 0
	for _, name := range []string{"staging", "production"} {
		obj, err := getKCLArtifact(context.Background(), p.ns, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range obj.Status.History {
			if input(e, "web.tag") == tag {
				publishes++
				t.Errorf("%s published %s (%s), which failed in dev", name, tag, e.Digest)
			}
		}
	}
	figureCount("promotion: "+tag+": publishes in staging and production (expected 0)", publishes)
	// dev rendered it, staging and production rendered it ahead; the rollback renders nothing
	p.checkRenders(t, renders, tag+" failing in dev")
}

// forgeHealthy writes the stage's history entry of digest as Healthy since an hour, and lifts its
// quarantine, as an admin of its namespace may (the suite's client is a cluster admin: the status
// subresource is all it uses).
func forgeHealthy(t *testing.T, ns, name, digest string) {
	t.Helper()
	waitFor(t, name+"'s "+digest+" forged Healthy in status", func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, name)
		if err != nil {
			return false, "", err
		}
		for i, e := range obj.Status.History {
			if e.Digest == digest {
				long := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
				obj.Status.History[i].Health, obj.Status.History[i].HealthyAt, obj.Status.History[i].Failure = kclv1.HealthHealthy, &long, nil
				// a quarantine in status can only close a gate; without it, only the recorded
				// Failed keeps the tag out
				if rem := obj.Status.Remediation; rem != nil && rem.Quarantined != nil && rem.Quarantined.Digest == digest {
					rem.Quarantined = nil
				}
				err := suite.client.Status().Update(ctx, obj)
				return err == nil, fmt.Sprintf("update: %v", err), nil
			}
		}
		return false, "no entry " + digest + " in " + historyOf(obj), nil
	})
}

// waitTagHealth waits until the stage's history entry of (sourceRevision, tag) has this health.
func waitTagHealth(t *testing.T, ns, name, sourceRevision, tag, health string) kclv1.ArtifactHistoryEntry {
	t.Helper()
	var entry kclv1.ArtifactHistoryEntry
	waitFor(t, name+"'s "+tag+" "+health, func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, name)
		if err != nil {
			return false, "", err
		}
		for _, e := range obj.Status.History {
			if e.SourceRevision == sourceRevision && input(e, "web.tag") == tag && e.Health == health {
				entry = e
				return true, "", nil
			}
		}
		return false, kclState(obj) + " history " + historyOf(obj), nil
	})
	return entry
}

// waitGateClosed waits until the stage lists tag's artifact as waiting with its upstream gate
// closed and, when reason is set, Promoted=False with that reason.
func (p *promotion) waitGateClosed(t *testing.T, name, tag, reason string) {
	t.Helper()
	waitFor(t, name+" holding "+tag+" at its upstream gate", func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, p.ns, name)
		if err != nil {
			return false, "", err
		}
		w, ok := waitingOfTag(obj, tag)
		if !ok {
			return false, "waiting " + waitingOf(obj), nil
		}
		g := gateOf(w, kclv1.GateUpstream)
		c := conditions.Get(obj, kclv1.PromotedCondition)
		state := fmt.Sprintf("gate %+v, %s", g, kclState(obj))
		if g == nil || g.Open || c == nil || c.Status != metav1.ConditionFalse {
			return false, state, nil
		}
		t.Logf("%s holds %s: gate upstream %q, Promoted %s: %s", name, tag, g.Message, c.Reason, c.Message)
		return reason == "" || c.Reason == reason, state, nil
	})
}

// keepServing samples every second for d that staging and production, their ExternalArtifacts
// and their Kustomizations stay at what they served, and that tag is never attempted; it
// returns the number of samples.
func (p *promotion) keepServing(t *testing.T, tag string, d time.Duration) int {
	t.Helper()
	ctx := context.Background()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.After(d)
	samples := 0
	for {
		select {
		case <-deadline:
			return samples
		case <-tick.C:
		}
		for _, name := range []string{"staging", "production"} {
			good := p.serving[name]
			obj, err := getKCLArtifact(ctx, p.ns, name)
			if err != nil {
				t.Fatal(err)
			}
			var ea sourcev1.ExternalArtifact
			var ks kustomizev1.Kustomization
			key := client.ObjectKey{Namespace: p.ns, Name: name}
			if err := suite.client.Get(ctx, key, &ea); err != nil {
				t.Fatal(err)
			}
			if err := suite.client.Get(ctx, key, &ks); err != nil {
				t.Fatal(err)
			}
			w, _ := waitingOfTag(obj, tag)
			switch {
			case digestOf(obj) != good.Digest:
				t.Fatalf("%s publishes %s, want %s (%s never ran healthy upstream)", name, digestOf(obj), good.Digest, tag)
			case ea.Status.Artifact == nil || ea.Status.Artifact.Digest != good.Digest:
				t.Fatalf("%s's ExternalArtifact holds %+v, want %s", name, ea.Status.Artifact, good.Digest)
			case ks.Status.LastAttemptedRevision != good.Revision || ks.Status.LastAppliedRevision != good.Revision:
				t.Fatalf("%s's Kustomization attempted %s, applied %s, want %s (waiting: %s)", name,
					ks.Status.LastAttemptedRevision, ks.Status.LastAppliedRevision, good.Revision, w.Revision)
			}
		}
		samples++
	}
}

// approvalAndWindow: production requires approval and has a window every two minutes for one.
// tag flows to staging; production renders it ahead and holds it, gates upstream and soak
// open, through at least 10 s of an open window while nobody approves; approved with `flux kcl
// approve` while the window is closed, it holds it until the window opens, and publishes it then.
func (p *promotion) approvalAndWindow(t *testing.T, sourceRevision, tag string) {
	ctx := context.Background()
	sched, err := cron.ParseStandard(promotionWindow)
	if err != nil {
		t.Fatal(err)
	}
	patchSpec(t, p.ns, "production", fmt.Sprintf(`{"promotion":{"from":{"name":"staging"},"soak":%q,"approval":"Required",`+
		`"windows":[{"schedule":%q,"duration":%q}]}}`, promotionSoak, promotionWindow, promotionWindowDuration))
	waitFor(t, "production at its new generation", func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, p.ns, "production")
		if err != nil {
			return false, "", err
		}
		return obj.Status.ObservedGeneration == obj.Generation, kclState(obj), nil
	})
	renders := p.renders(t)
	image, digest := p.tags.pushAndSelect(t, tagged(t, p.app, tag), tag)
	p.flow(t, sourceRevision, tag, image, digest, tag, p.stages[:2])
	before := p.serving["production"]

	// production: every gate but the approval opens; it holds through an open window
	w := p.waitGates(t, tag, func(w kclv1.WaitingArtifact) bool {
		return gateOpen(w, kclv1.GateUpstream) && gateOpen(w, kclv1.GateSoak) && !gateOpen(w, kclv1.GateApproval)
	})
	p.checkWaitingYAML(t, w, image)
	heldOpen := p.holdUnapproved(t, w.Digest, before, sched)
	figure("promotion: "+tag+": production held unapproved inside an open window", heldOpen)

	// approve while the window is closed
	bin, plugins := fluxAndPlugin(t)
	who, err := suite.install.Run(ctx, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if who = strings.TrimSpace(who); err != nil || who == "" {
		t.Fatalf("kubectl auth whoami: %q, %v", who, err)
	}
	approved := time.Now()
	opens := sched.Next(approved.UTC())
	if inWindow(sched, approved) || opens.Sub(approved) < 15*time.Second {
		t.Fatalf("approving at %s: the window must be closed and open no sooner than in 15 s (opens %s)", approved.UTC().Format(time.RFC3339), opens.Format(time.RFC3339))
	}
	r := fluxenv.RunFlux(t, bin, plugins, suite.node.KubeconfigPath, "\x00", "kcl", "approve", "production", "-n", p.ns)
	if r.Code != 0 {
		t.Fatalf("flux kcl approve production: exit %d: %s", r.Code, r.Stderr)
	}
	w = p.waitGates(t, tag, func(w kclv1.WaitingArtifact) bool { return gateOpen(w, kclv1.GateApproval) })
	figure("promotion: "+tag+": flux kcl approve to approval gate open", time.Since(approved))
	if w.ApprovedBy != who || w.ApprovedAt == nil {
		t.Errorf("the waiting artifact is approved by %q at %v, want %q", w.ApprovedBy, w.ApprovedAt, who)
	}
	g := gateOf(w, kclv1.GateWindow)
	if g == nil || g.Open || g.OpensAt == nil || !g.OpensAt.Time.Equal(opens) {
		t.Errorf("the window gate is %+v, want closed, opening at %s (%s)", g, opens.Format(time.RFC3339), promotionWindow)
	}
	if obj, err := getKCLArtifact(ctx, p.ns, "production"); err != nil || conditions.GetReason(obj, kclv1.PromotedCondition) != kclv1.OutsideWindowReason {
		t.Errorf("production approved outside its window: want Promoted reason %s: %s (%v)", kclv1.OutsideWindowReason, kclState(obj), err)
	}

	e := p.waitServing(t, "production", sourceRevision, tag)
	seen := time.Now()
	figure("promotion: "+tag+": window open to production published (seen, 100 ms)", seen.Sub(opens))
	figure("promotion: "+tag+": window open to production published (status, 1 s)", e.LastPublished.Sub(opens))
	if e.LastPublished.Time.Before(opens) || !e.LastPublished.Time.Before(opens.Add(promotionWindowDuration)) {
		t.Errorf("production published %s at %s, outside the window [%s, +%s)", tag, e.LastPublished.Format(time.RFC3339), opens.Format(time.RFC3339), promotionWindowDuration)
	}
	p.checkPromoted(t, p.stages[2], e, tag+" (approval and window)", seen)
	if rec := e.Promotion; rec == nil || rec.ApprovedBy != who || rec.ApprovedAt == nil || rec.ApprovedAt.Time.Before(approved.Truncate(time.Second)) {
		t.Errorf("production's promotion record %+v, want approved by %q after %s", rec, who, approved.Format(time.RFC3339))
	}
	waitPodsOn(t, "promotion-production", image, digest)
	waitAnswers(t, "promotion-production", "production", "")
	p.serving["production"] = waitStageHealth(t, p.ns, "production", e.Digest)
	// production rendered it ahead, and nothing while it waited for the approval and the window
	p.checkRenders(t, renders, tag+" held for approval and window")
	p.checkPromotedEvent(t, tag, sourceRevision)
	pod, err := controllerPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.checkGateMetric(t, pod)
}

// waitGates waits until production lists tag's artifact as waiting and ok holds for it.
func (p *promotion) waitGates(t *testing.T, tag string, ok func(kclv1.WaitingArtifact) bool) kclv1.WaitingArtifact {
	t.Helper()
	var found kclv1.WaitingArtifact
	waitFigure(t, "production's gates of "+tag, func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, p.ns, "production")
		if err != nil {
			return false, "", err
		}
		w, present := waitingOfTag(obj, tag)
		found = w
		return present && ok(w), kclState(obj) + " waiting " + waitingOf(obj), nil
	})
	return found
}

// checkWaitingYAML reads the YAML view of production's waiting artifact from the artifact server,
// from inside the node's network, before it is published: what an approver reads. It must hold
// production's message and the image waiting; the body is not logged (rendered output).
func (p *promotion) checkWaitingYAML(t *testing.T, w kclv1.WaitingArtifact, image string) {
	t.Helper()
	url := strings.Replace(w.URL, ".tar.gz", ".yaml", 1)
	resp, err := suite.node.HTTPClient(10 * time.Second).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET the waiting artifact's YAML view: %s, %v", resp.Status, err)
	}
	if !strings.Contains(string(body), "image: "+image) || !strings.Contains(string(body), "value: production") {
		t.Errorf("the waiting artifact's YAML view (%d bytes) does not hold production's message and the image %s", len(body), image)
	}
}

// holdUnapproved samples production every second: it keeps serving before while digest waits
// for approval, until at least 10 s of an open window have passed since its other gates opened
// and the window is closed again with at least 20 s before it opens. Some sample must show the
// window gate open and the stage waiting for the approval alone. It returns how long the window
// was open.
func (p *promotion) holdUnapproved(t *testing.T, digest string, before kclv1.ArtifactHistoryEntry, sched cron.Schedule) time.Duration {
	t.Helper()
	var open time.Duration
	approvalAlone := false
	last := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for deadline := time.Now().Add(4 * time.Minute); ; <-tick.C {
		now := time.Now()
		if inWindow(sched, now) {
			open += now.Sub(last)
		}
		last = now
		if open >= 10*time.Second && !inWindow(sched, now) && sched.Next(now.UTC()).Sub(now) >= 20*time.Second {
			if !approvalAlone {
				t.Errorf("in %s of an open window, no sample showed production's window gate open and Promoted %s", open.Round(time.Second), kclv1.WaitingForApprovalReason)
			}
			return open
		}
		if now.After(deadline) {
			t.Fatalf("no closed window after 10 s of an open one in 4 minutes (%s)", promotionWindow)
		}
		obj, err := getKCLArtifact(context.Background(), p.ns, "production")
		if err != nil {
			t.Fatal(err)
		}
		if digestOf(obj) != before.Digest {
			t.Fatalf("production published %s without an approval (%s waits): %s", digestOf(obj), digest, kclState(obj))
		}
		if w, ok := waitingOfDigest(obj, digest); ok && gateOpen(w, kclv1.GateWindow) &&
			conditions.GetReason(obj, kclv1.PromotedCondition) == kclv1.WaitingForApprovalReason {
			approvalAlone = true
		}
	}
}

// inWindow tells whether the schedule fired within (at - duration, at].
func inWindow(sched cron.Schedule, at time.Time) bool {
	return !sched.Next(at.UTC().Add(-promotionWindowDuration)).After(at.UTC())
}

// checkPromotedEvent checks production's Promoted event for tag: it names the tag and staging,
// and carries the source revision as its origin revision.
func (p *promotion) checkPromotedEvent(t *testing.T, tag, sourceRevision string) {
	t.Helper()
	var found *corev1.Event
	waitFor(t, "production's Promoted event of "+tag, func(ctx context.Context) (bool, string, error) {
		var list corev1.EventList
		if err := suite.client.List(ctx, &list, client.InNamespace(p.ns)); err != nil {
			return false, "", err
		}
		for i, e := range list.Items {
			if e.InvolvedObject.Kind == kclv1.KCLArtifactKind && e.InvolvedObject.Name == "production" &&
				e.Type == corev1.EventTypeNormal && e.Reason == kclv1.PromotedReason && strings.Contains(e.Message, tag) {
				found = &list.Items[i]
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d events", len(list.Items)), nil
	})
	t.Logf("Promoted: %s", found.Message)
	if !strings.Contains(found.Message, "staging") {
		t.Errorf("the Promoted event does not name where %s was proved: %q", tag, found.Message)
	}
	if origin := found.Annotations[kclv1.GroupVersion.Group+"/"+eventv1.MetaOriginRevisionKey]; origin != sourceRevision {
		t.Errorf("the Promoted event's origin revision is %q, want %s", origin, sourceRevision)
	}
}

// checkGateMetric checks that the gates production waited on were observed.
func (p *promotion) checkGateMetric(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	text, err := scrapeController(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	for _, gate := range []string{kclv1.GateSoak, kclv1.GateWindow, kclv1.GateApproval} {
		if n := metricSum(text, promotionGateMetric+"_count", map[string]string{"namespace": p.ns, "gate": gate}); n < 1 {
			t.Errorf("%s_count{gate=%q} is %v: production's wait was not observed", promotionGateMetric, gate, n)
		}
	}
}

// waitingOfTag is the stage's waiting artifact rendered with web.tag tag.
func waitingOfTag(obj *kclv1.KCLArtifact, tag string) (kclv1.WaitingArtifact, bool) {
	if obj.Status.Promotion == nil {
		return kclv1.WaitingArtifact{}, false
	}
	for _, w := range obj.Status.Promotion.Waiting {
		for _, in := range w.Inputs {
			if in.Name == "web.tag" && in.Value == tag {
				return w, true
			}
		}
	}
	return kclv1.WaitingArtifact{}, false
}

// waitingOfDigest is the stage's waiting artifact of this digest.
func waitingOfDigest(obj *kclv1.KCLArtifact, digest string) (kclv1.WaitingArtifact, bool) {
	if obj.Status.Promotion != nil {
		for _, w := range obj.Status.Promotion.Waiting {
			if w.Digest == digest {
				return w, true
			}
		}
	}
	return kclv1.WaitingArtifact{}, false
}

func gateOf(w kclv1.WaitingArtifact, name string) *kclv1.GateStatus {
	for i := range w.Gates {
		if w.Gates[i].Name == name {
			return &w.Gates[i]
		}
	}
	return nil
}

func gateOpen(w kclv1.WaitingArtifact, name string) bool {
	g := gateOf(w, name)
	return g != nil && g.Open
}

// waitingOf is one line per waiting artifact, for messages.
func waitingOf(obj *kclv1.KCLArtifact) string {
	if obj.Status.Promotion == nil {
		return "[]"
	}
	var parts []string
	for _, w := range obj.Status.Promotion.Waiting {
		var gates []string
		for _, g := range w.Gates {
			gates = append(gates, fmt.Sprintf("%s=%t %s", g.Name, g.Open, g.Message))
		}
		parts = append(parts, fmt.Sprintf("%s from %s [%s]", w.Digest, w.SourceRevision, strings.Join(gates, ", ")))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}
