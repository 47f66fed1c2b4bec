package ui

import (
	"context"
	"slices"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputchange"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promotion"
)

// pipelineView is the chain of stages (spec.promotion.from) a KCLArtifact is in, by level: the
// top of the chain first, then the stages following the level before.
type pipelineView struct {
	Levels [][]stageView
	Err    string
}

// stageView is a stage as the pipeline draws it.
type stageView struct {
	Name, Link string // Link: its page, "" when another instance serves it
	This       bool
	Stage      bool   // it follows an upstream
	Upstream   string // spec.promotion.from
	Revision   string
	Source     string // the source revision it runs
	Inputs     []string
	InputsErr  string
	Health     healthView
	// Checks is what spec.verify's checks said of the artifact it runs; empty without them.
	Checks    checksView
	Gate      condView // the Promoted condition
	GateSince timeView
	// GateText is what the newest waiting artifact waits for as of the page, the condition's
	// message when nothing waits.
	GateText string
	Waiting  []waitingView
}

// checksView is a verification (status.history[].verification): its result and each check's
// last verdict and value.
type checksView struct {
	Result, Class string
	Checks        []string
}

func checksOf(v *kclv1.Verification) checksView {
	if v == nil {
		return checksView{}
	}
	c := checksView{Result: v.Result, Class: "unknown"}
	switch v.Result {
	case kclv1.VerificationPassed:
		c.Class = "ok"
	case kclv1.VerificationFailed:
		c.Class = "fail"
	}
	for _, ch := range v.Checks {
		t := ch.Name + " " + strings.ToLower(ch.Verdict)
		if ch.Value != "" {
			t += " (" + ch.Value + ")"
		}
		c.Checks = append(c.Checks, t)
	}
	return c
}

// waitingView is an artifact a stage rendered ahead and waits to publish.
type waitingView struct {
	Digest, Revision, Source, URL string
	Download                      string // from this view, "" when not served here
	Inputs                        []string
	Rendered                      timeView
	Gates                         []gateView
	ApprovedBy                    string
}

// gateView is a gate of a waiting artifact: what it waits for as of the page (Text), the
// controller's message (Message, when it says more) and when it opens.
type gateView struct {
	Name, Text, Message string
	Open                bool
	OpensAt             timeView
}

// maxInputValue is how much of an input's value a stage shows; the history has it whole.
const maxInputValue = 64

// chainOf is the KCLArtifacts of obj's namespace by name and the stages following each; obj is
// the page's copy.
func chainOf(obj *kclv1.KCLArtifact, items []kclv1.KCLArtifact) (map[string]*kclv1.KCLArtifact, map[string][]*kclv1.KCLArtifact) {
	byName := map[string]*kclv1.KCLArtifact{obj.Name: obj}
	for i := range items {
		if items[i].Namespace == obj.Namespace && items[i].Name != obj.Name {
			byName[items[i].Name] = &items[i]
		}
	}
	followers := map[string][]*kclv1.KCLArtifact{}
	for _, it := range byName {
		if up := upstreamOf(it); up != "" {
			followers[up] = append(followers[up], it)
		}
	}
	for _, f := range followers {
		slices.SortFunc(f, func(a, b *kclv1.KCLArtifact) int { return strings.Compare(a.Name, b.Name) })
	}
	return byName, followers
}

// upstreamOf is the name of the stage's upstream in its own namespace, "" for none: an upstream
// in another namespace is refused by the controller and drawn by no one here.
func upstreamOf(obj *kclv1.KCLArtifact) string {
	p := obj.Spec.Promotion
	if p == nil || (p.From.Namespace != "" && p.From.Namespace != obj.Namespace) {
		return ""
	}
	return p.From.Name
}

// pipelineOf draws the chain obj is in; nil when it is in none.
func (h *handler) pipelineOf(ctx context.Context, obj *kclv1.KCLArtifact, now time.Time, sensitive []string) *pipelineView {
	var list kclv1.KCLArtifactList
	if err := h.reader.List(ctx, &list, client.InNamespace(obj.Namespace)); err != nil {
		h.log.Error(err, "listing the stages of a namespace", "namespace", obj.Namespace)
		return &pipelineView{Err: "The stages of namespace " + obj.Namespace + " cannot be listed: " + err.Error()}
	}
	byName, followers := chainOf(obj, list.Items)
	if obj.Spec.Promotion == nil && len(followers[obj.Name]) == 0 {
		return nil
	}
	// up to the top of the chain; in a cycle, obj is the top
	top, seen := obj, map[string]bool{obj.Name: true}
	for up := byName[upstreamOf(top)]; up != nil && !seen[up.Name]; up = byName[upstreamOf(top)] {
		top, seen[up.Name] = up, true
	}
	p := &pipelineView{}
	drawn := map[string]bool{top.Name: true}
	for level := []*kclv1.KCLArtifact{top}; len(level) > 0; {
		var views []stageView
		var next []*kclv1.KCLArtifact
		for _, s := range level {
			views = append(views, h.stageOf(ctx, s, obj, now, sensitive))
			for _, f := range followers[s.Name] {
				if !drawn[f.Name] {
					drawn[f.Name] = true
					next = append(next, f)
				}
			}
		}
		p.Levels = append(p.Levels, views)
		level = next
	}
	return p
}

// stageOf is s as its box in obj's pipeline: its inputs are masked with its own Secrets' values.
func (h *handler) stageOf(ctx context.Context, s, page *kclv1.KCLArtifact, now time.Time, pageSensitive []string) stageView {
	v := stageView{Name: s.Name, This: s.Name == page.Name, Stage: s.Spec.Promotion != nil,
		Gate: condOf(s, kclv1.PromotedCondition), Health: healthView{Class: "none"}}
	if _, ok := h.dirOf(s); ok && !v.This {
		v.Link = pageLink(s.Namespace, s.Name)
	}
	if v.Stage {
		v.Upstream = s.Spec.Promotion.From.Name
		if c := apimeta.FindStatusCondition(s.Status.Conditions, kclv1.PromotedCondition); c != nil {
			v.GateSince = timeOf(c.LastTransitionTime, now)
		}
	}
	sensitive, err := pageSensitive, error(nil)
	if !v.This && h.sensitive != nil && !h.showSecrets {
		sensitive, err = h.sensitive(ctx, s.Namespace, s.Name)
	}
	show := func(inputs []kclv1.InputValue) []string {
		if err != nil {
			v.InputsErr = "inputs not shown: the values of its Secrets, which they would mask, cannot be read"
			return nil
		}
		return inputsOf(inputs, sensitive)
	}
	if hist := historyOf(s); len(hist) > 0 {
		e := hist[currentIndex(s, hist)]
		v.Revision, v.Source, v.Health, v.Inputs = e.Revision, e.SourceRevision, healthOf(e, now), show(e.Inputs)
		v.Checks = checksOf(e.Verification)
	}
	v.GateText = v.Gate.Message
	if st := s.Status.Promotion; st != nil {
		_, served := h.dirOf(s)
		for _, w := range st.Waiting {
			v.Waiting = append(v.Waiting, waitingOf(s, w, served, show(w.Inputs), now))
		}
		if len(v.Waiting) > 0 {
			if i := slices.IndexFunc(v.Waiting[0].Gates, func(g gateView) bool { return !g.Open }); i >= 0 {
				v.GateText = v.Waiting[0].Gates[i].Text
			}
		}
	}
	return v
}

func waitingOf(s *kclv1.KCLArtifact, w kclv1.WaitingArtifact, served bool, inputs []string, now time.Time) waitingView {
	v := waitingView{Digest: w.Digest, Revision: w.Revision, Source: w.SourceRevision, URL: w.URL, Inputs: inputs,
		Rendered: timeOf(w.RenderedAt, now), ApprovedBy: w.ApprovedBy}
	if file := archiveFile(waitingEntry(w)); served && archiveName.MatchString(file) {
		v.Download = pageLink(s.Namespace, s.Name) + file
	}
	for _, g := range w.Gates {
		gv := gateView{Name: g.Name, Open: g.Open, Text: gateProgress(s, g, now), Message: g.Message}
		if gv.Message == gv.Text {
			gv.Message = ""
		}
		if g.OpensAt != nil && !g.Open && g.Name != kclv1.GateWindow {
			gv.OpensAt = timeOf(*g.OpensAt, now)
		}
		v.Gates = append(v.Gates, gv)
	}
	return v
}

// gateProgress is what a gate waits for, as of now: its progress, else the controller's message.
func gateProgress(s *kclv1.KCLArtifact, g kclv1.GateStatus, now time.Time) string {
	if g.Open {
		return "open"
	}
	if t := promotion.Progress(s.Spec.Promotion, g, now); t != "" {
		return t
	}
	if g.Message != "" {
		return g.Message
	}
	return gateFallback(g)
}

// gateFallback says what a gate waits for when the controller gave no message.
func gateFallback(g kclv1.GateStatus) string {
	if g.Open {
		return "open"
	}
	switch g.Name {
	case kclv1.GateUpstream:
		return "the upstream has not run it healthy"
	case kclv1.GateSoak:
		return "soaking in the upstream"
	case kclv1.GateWindow:
		return "outside window"
	case kclv1.GateApproval:
		return "waiting for approval"
	}
	return "closed"
}

// waitingEntry is a waiting artifact as a kept one, to read or download it alike.
func waitingEntry(w kclv1.WaitingArtifact) kclv1.ArtifactHistoryEntry {
	e := w.Entry()
	e.LastPublished = w.RenderedAt // its archive's time
	return e
}

// inputsOf is "web.tag=1.4.3" for each input, an ImagePolicy's image, name and digest left out
// beside its tag (the tag says which release), a Secret's value wherever it lands masked, and
// long values cut.
func inputsOf(inputs []kclv1.InputValue, sensitive []string) []string {
	from := make(map[string]string, len(inputs))
	for _, in := range inputs {
		from[in.Name] = in.From
	}
	var out []string
	for _, in := range inputs {
		if impliedByTag(in, from) {
			continue
		}
		value := in.Value
		for _, s := range sensitive {
			if s != "" {
				value = strings.ReplaceAll(value, s, inputchange.Masked)
			}
		}
		out = append(out, in.Name+"="+inputchange.Cut(value, maxInputValue))
	}
	return out
}

func impliedByTag(in kclv1.InputValue, from map[string]string) bool {
	if !strings.HasPrefix(in.From, "ImagePolicy/") {
		return false
	}
	for _, part := range []string{".image", ".name", ".digest"} {
		if prefix, ok := strings.CutSuffix(in.Name, part); ok && from[prefix+".tag"] == in.From {
			return true
		}
	}
	return false
}
