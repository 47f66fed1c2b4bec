package ui

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// pipeline is dev → staging → production in team-a, with the status the controller writes for
// stages (fixtures): dev runs web 1.4.3; staging runs 1.4.2 and waits for the soak of 1.4.3;
// production runs 1.4.1 and waits, with 1.4.2, for its window and an approval.
type pipeline struct {
	*fixture
	dev, staging, production *kclv1.KCLArtifact
	stagingWaits, prodWaits  kclv1.WaitingArtifact
}

// webInputs are the inputs at an ImagePolicy's tag, with the stage's own replicas.
func webInputs(tag, replicas string) []kclv1.InputValue {
	d := "sha256:" + strings.Repeat("e", 64)
	return []kclv1.InputValue{
		{Name: "replicas", Value: replicas},
		{Name: "web.digest", Value: d, From: "ImagePolicy/web"},
		{Name: "web.image", Value: "ghcr.io/acme/web:" + tag + "@" + d, From: "ImagePolicy/web"},
		{Name: "web.tag", Value: tag, From: "ImagePolicy/web"},
	}
}

func newPipeline(t *testing.T) *pipeline {
	t.Helper()
	f := newFixture(t)
	p := &pipeline{fixture: f}
	t0 := time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)
	src := func(n int) string { return "main@sha1:" + strings.Repeat(string(rune('0'+n)), 40) }
	// store writes an artifact of obj rendered from source n with web at tag, published at hours
	store := func(obj *kclv1.KCLArtifact, n int, tag, replicas string, hours int) kclv1.ArtifactHistoryEntry {
		e := storeArtifact(t, f.root, obj, src(n), manifestsV("team-a", obj.Name+"-"+tag, secretV1, false), 2, t0.Add(time.Duration(hours)*time.Hour))
		at := metav1.NewTime(e.LastPublished.Add(5 * time.Minute))
		e.Health, e.HealthyAt, e.Inputs = kclv1.HealthHealthy, &at, webInputs(tag, replicas)
		return e
	}
	waiting := func(e kclv1.ArtifactHistoryEntry, gates ...kclv1.GateStatus) kclv1.WaitingArtifact {
		return kclv1.WaitingArtifact{Digest: e.Digest, Revision: e.Revision, SourceRevision: e.SourceRevision, URL: e.URL,
			Objects: e.Objects, InputDigest: "sha256:inputs", RenderedAt: e.LastPublished, Inputs: e.Inputs, Gates: gates}
	}
	promoted := func(obj *kclv1.KCLArtifact, status metav1.ConditionStatus, reason, msg string) {
		obj.Status.Conditions = append(obj.Status.Conditions, metav1.Condition{Type: kclv1.PromotedCondition, Status: status,
			Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(t0.Add(3 * time.Hour))})
	}
	since := &metav1.Time{Time: t0.Add(3 * time.Hour)}
	// the gates' progress is as of the page: the soak ends in 3 minutes, the window opens at 14:00
	now := time.Now().Truncate(time.Second)
	soakEnds := &metav1.Time{Time: now.Add(3 * time.Minute)}
	windowOpens := time.Date(now.Year(), now.Month(), now.Day(), 14, 0, 0, 0, time.UTC)
	if !windowOpens.After(now) {
		windowOpens = windowOpens.Add(24 * time.Hour)
	}

	p.dev = newObj("team-a", "dev")
	publish(p.dev, store(p.dev, 3, "1.4.3", "1", 2), store(p.dev, 2, "1.4.2", "1", 0))

	p.staging = newObj("team-a", "staging")
	p.staging.Spec.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "dev"}, Soak: &metav1.Duration{Duration: 10 * time.Minute}}
	publish(p.staging, store(p.staging, 2, "1.4.2", "2", 1), store(p.staging, 1, "1.4.1", "2", 0))
	p.stagingWaits = waiting(store(p.staging, 3, "1.4.3", "2", 3),
		kclv1.GateStatus{Name: kclv1.GateUpstream, Open: true, Since: since},
		kclv1.GateStatus{Name: kclv1.GateSoak, Since: since, OpensAt: soakEnds,
			Message: "soak 10m0s of dev's " + p.dev.Status.History[0].Revision + ": healthy since …"})
	p.staging.Status.Promotion = &kclv1.PromotionStatus{Upstream: "dev", Waiting: []kclv1.WaitingArtifact{p.stagingWaits}}
	promoted(p.staging, metav1.ConditionFalse, kclv1.WaitingForSoakReason, "soak 7m/10m")

	p.production = newObj("team-a", "production")
	p.production.Spec.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "staging"}, Approval: kclv1.ApprovalRequired,
		Windows: []kclv1.PromotionWindow{{Schedule: "0 14 * * *", Duration: metav1.Duration{Duration: time.Hour}}}}
	publish(p.production, store(p.production, 1, "1.4.1", "5", 1))
	p.prodWaits = waiting(store(p.production, 2, "1.4.2", "5", 2),
		kclv1.GateStatus{Name: kclv1.GateUpstream, Open: true, Since: since},
		kclv1.GateStatus{Name: kclv1.GateWindow, Since: since, OpensAt: &metav1.Time{Time: windowOpens}, Message: "outside the windows " + evil},
		kclv1.GateStatus{Name: kclv1.GateApproval, Since: since, Message: "waiting for approval of " + evil})
	p.production.Status.Promotion = &kclv1.PromotionStatus{Upstream: "staging", Waiting: []kclv1.WaitingArtifact{p.prodWaits}}
	promoted(p.production, metav1.ConditionFalse, kclv1.OutsideWindowReason, "outside window, opens 14:00")

	f.reader.objs = append(f.reader.objs, p.dev, p.staging, p.production)
	return p
}

var stageBox = regexp.MustCompile(`<div class="stage(?: this)?" id="`)

// pipelineStages are the stage boxes of a page, as text, in order.
func pipelineStages(t *testing.T, page string) []string {
	t.Helper()
	var stages []string
	for _, s := range stageBox.Split(between(t, page, `id="pipeline-stages"`, `</ol>`), -1)[1:] {
		stages = append(stages, strings.Join(strings.Fields(text(`<div id="`+s)), " "))
	}
	return stages
}

// A stage's page draws the chain it is in, top first: each stage with what it runs, its gate,
// and the artifacts it waits to publish, with each gate's progress and links to the artifact.
func TestPipelineOnAStagesPage(t *testing.T) {
	p := newPipeline(t)
	srv := p.server(t, Options{})
	code, _, page := get(t, srv, "/kclartifact/team-a/staging/")
	if code != http.StatusOK {
		t.Fatalf("GET: %d\n%s", code, page)
	}
	stages := pipelineStages(t, page)
	if len(stages) != 3 {
		t.Fatalf("pipeline of %d stages, want 3:\n%s", len(stages), strings.Join(stages, "\n"))
	}
	for i, want := range [][]string{
		{"dev", "runs main@sha1:333333333333…", "Healthy", "replicas=1", "web.tag=1.4.3"},
		{"staging", "this page", "follows dev", "runs main@sha1:222222222222…", "web.tag=1.4.2", "WaitingForSoak",
			"waiting", "main@sha1:333333333333…", "web.tag=1.4.3", "gate WaitingForSoak soak 7m/10m", "upstream", "soak", "soak 7m/10m", "(in 2m)", "soak 10m0s of dev's", "opens " + p.stagingWaits.Gates[1].OpensAt.UTC().Format("2006-01-02 15:04:05 UTC")},
		{"production", "follows staging", "runs main@sha1:111111111111…", "replicas=5", "web.tag=1.4.1", "gate OutsideWindow outside window, opens 14:00 UTC",
			"web.tag=1.4.2", "window", "outside window, opens 14:00 UTC", "outside the windows " + evil, "approval", "waiting for approval", "waiting for approval of " + evil},
	} {
		expectContains(t, "stage "+want[0], stages[i], want...)
		// an ImagePolicy's image parts go with its tag
		expectNotContains(t, "stage "+want[0], stages[i], "web.image=", "web.digest=")
	}
	expectNotContains(t, "stage dev", stages[0], "gate", "follows")
	// the other stages link to their pages, the waiting artifacts to their archives
	expectContains(t, "the pipeline", between(t, page, `id="pipeline-stages"`, `</ol>`),
		`href="/kclartifact/team-a/dev/"`, `href="/kclartifact/team-a/production/"`,
		`href="/kclartifact/team-a/staging/`+archiveFile(kclv1.ArtifactHistoryEntry{URL: p.stagingWaits.URL})+`"`,
		`href="`+p.stagingWaits.URL+`"`, `href="/kclartifact/team-a/production/`+archiveFile(kclv1.ArtifactHistoryEntry{URL: p.prodWaits.URL})+`"`)
	expectEscaped(t, "the pipeline", page)

	// the same chain from its top and its end
	for _, name := range []string{"dev", "production"} {
		_, _, page := get(t, srv, "/kclartifact/team-a/"+name+"/")
		if got := pipelineStages(t, page); len(got) != 3 || !strings.Contains(got[map[string]int{"dev": 0, "production": 2}[name]], "this page") {
			t.Errorf("pipeline on %s's page:\n%s", name, strings.Join(got, "\n"))
		}
	}
}

// A KCLArtifact in no chain has no pipeline; a stage whose upstream is missing is drawn alone.
func TestPipelineOnlyForStages(t *testing.T) {
	p := newPipeline(t)
	p.production.Spec.Promotion.From.Name = "gone"
	srv := p.server(t, Options{})
	if _, _, page := get(t, srv, "/kclartifact/team-a/app/"); strings.Contains(page, `id="pipeline"`) {
		t.Errorf("a KCLArtifact in no chain has a pipeline")
	}
	_, _, page := get(t, srv, "/kclartifact/team-a/production/")
	if got := pipelineStages(t, page); len(got) != 1 || !strings.Contains(got[0], "follows gone") {
		t.Errorf("pipeline of a stage whose upstream is missing:\n%s", strings.Join(got, "\n"))
	}
}

// The waiting artifact's archive downloads from this view, as the history's do.
func TestDownloadWaitingArtifact(t *testing.T) {
	p := newPipeline(t)
	srv := p.server(t, Options{})
	file := archiveFile(kclv1.ArtifactHistoryEntry{URL: p.prodWaits.URL})
	code, hdr, body := get(t, srv, "/kclartifact/team-a/production/"+file)
	if code != http.StatusOK || hdr.Get("Content-Type") != "application/gzip" || !strings.HasPrefix(body, "\x1f\x8b") {
		t.Errorf("GET the waiting archive: %d %s", code, hdr.Get("Content-Type"))
	}
	// only a stage's own: not staging's waiting artifact through production
	if code, _, _ := get(t, srv, "/kclartifact/team-a/production/"+archiveFile(kclv1.ArtifactHistoryEntry{URL: p.stagingWaits.URL})); code != http.StatusNotFound {
		t.Errorf("another stage's waiting archive: %d, want 404", code)
	}
}

// Values of a stage's Secrets that land in another input are masked in the pipeline, with each
// stage's own Secrets.
func TestPipelineMasksEachStagesSecrets(t *testing.T) {
	p := newPipeline(t)
	p.dev.Status.History[0].Inputs = append(p.dev.Status.History[0].Inputs, kclv1.InputValue{Name: "copy", Value: "pw=" + secretV2, From: "ConfigMap/leaky"})
	asked := map[string]bool{}
	sensitive := func(_ context.Context, ns, name string) ([]string, error) {
		asked[ns+"/"+name] = true
		if name == "dev" {
			return []string{secretV2}, nil
		}
		return nil, nil
	}
	_, _, page := get(t, p.server(t, Options{Sensitive: sensitive}), "/kclartifact/team-a/staging/")
	expectNotContains(t, "the page", page, secretV2)
	expectContains(t, "the pipeline", pipelineStages(t, page)[0], "copy=pw=***")
	if !asked["team-a/dev"] {
		t.Errorf("dev's Secrets were not read for its inputs: %v", asked)
	}
}

// The list says which KCLArtifacts are stages, what each follows and what its gate says.
func TestIndexShowsStages(t *testing.T) {
	p := newPipeline(t)
	_, _, page := get(t, p.server(t, Options{}), "/")
	expectContains(t, "staging's row", strings.Join(strings.Fields(text(between(t, page, `id="ka-team-a-staging"`, `</tr>`))), " "),
		"follows dev WaitingForSoak 1 waiting")
	expectContains(t, "production's row", strings.Join(strings.Fields(text(between(t, page, `id="ka-team-a-production"`, `</tr>`))), " "),
		"follows staging OutsideWindow 1 waiting")
	expectNotContains(t, "dev's row", text(between(t, page, `id="ka-team-a-dev"`, `</tr>`)), "follows")
}

// A stage box says what the checks of spec.verify said of what the stage runs, and a waiting
// artifact held by a stopped line or a rejection shows those gates.
func TestPipelineShowsChecksAndHeldGates(t *testing.T) {
	p := newPipeline(t)
	at := metav1.NewTime(time.Now().Truncate(time.Second))
	p.dev.Status.History[0].Verification = &kclv1.Verification{Result: kclv1.VerificationPassed, StartedAt: at, EndsAt: at,
		Checks: []kclv1.CheckStatus{{Name: "error-rate", Verdict: "Passed", Value: "0.012", LastRunAt: &at}}}
	p.stagingWaits.Gates = append([]kclv1.GateStatus{{Name: kclv1.GateLine, Since: &at,
		Message: "the line is stopped (namespace team-a) by oncall: incident 42"}}, p.stagingWaits.Gates...)
	p.staging.Status.Promotion.Waiting = []kclv1.WaitingArtifact{p.stagingWaits}
	srv := p.server(t, Options{})
	_, _, page := get(t, srv, "/kclartifact/team-a/staging/")
	stages := pipelineStages(t, page)
	if len(stages) != 3 {
		t.Fatalf("pipeline of %d stages, want 3", len(stages))
	}
	expectContains(t, "stage dev", stages[0], "checks Verified error-rate passed (0.012)")
	expectContains(t, "stage staging", stages[1], "line", "the line is stopped (namespace team-a) by oncall: incident 42")
	expectNotContains(t, "stage staging", stages[1], "checks ")
}
