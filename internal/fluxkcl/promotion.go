package fluxkcl

import (
	"fmt"
	"slices"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputchange"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promotion"
)

// maxStageInputs is how many inputs a stage's line names; the rest are counted.
const maxStageInputs = 4

// inputsText is "web.tag=1.4.3, replicas=2": at most n inputs (all when n is 0), an ImagePolicy's
// image, name and digest left out beside its tag (the tag says which release; the digest is in
// the history), values cut and digests shortened. Secret values are masked in status already.
func inputsText(inputs []kclv1.InputValue, n int) string {
	shown := withoutImageParts(inputs)
	var parts []string
	for i, in := range shown {
		if n > 0 && i == n {
			parts = append(parts, fmt.Sprintf("… (%d more)", len(shown)-n))
			break
		}
		parts = append(parts, in.Name+"="+truncateHex(inputchange.Cut(in.Value, 64)))
	}
	return strings.Join(parts, ", ")
}

// withoutImageParts drops `<as>.image`, `<as>.name` and `<as>.digest` of an ImagePolicy whose
// `<as>.tag` is recorded beside them.
func withoutImageParts(inputs []kclv1.InputValue) []kclv1.InputValue {
	from := make(map[string]string, len(inputs))
	for _, in := range inputs {
		from[in.Name] = in.From
	}
	return slices.DeleteFunc(slices.Clone(inputs), func(in kclv1.InputValue) bool {
		if !strings.HasPrefix(in.From, "ImagePolicy/") {
			return false
		}
		for _, part := range []string{".image", ".name", ".digest"} {
			if prefix, ok := strings.CutSuffix(in.Name, part); ok && from[prefix+".tag"] == in.From {
				return true
			}
		}
		return false
	})
}

// closedGates names the closed gates of a waiting artifact of obj but skip, by what each waits for.
func closedGates(obj *kclv1.KCLArtifact, gates []kclv1.GateStatus, skip ...string) string {
	var closed []string
	for _, g := range gates {
		if !g.Open && !slices.Contains(skip, g.Name) {
			closed = append(closed, gateText(obj, g, time.Now()))
		}
	}
	return strings.Join(closed, "; ")
}

// gateText is what a closed gate waits for, as of now: its progress, else the controller's
// message with digests shortened.
func gateText(obj *kclv1.KCLArtifact, g kclv1.GateStatus, now time.Time) string {
	if t := promotion.Progress(obj.Spec.Promotion, g, now); t != "" {
		return t
	}
	if g.Message != "" {
		return truncateHex(g.Message)
	}
	return g.Name
}

// firstClosedGate is what the newest waiting artifact waits for, "" when nothing waits.
func firstClosedGate(obj *kclv1.KCLArtifact) string {
	p := obj.Status.Promotion
	if p == nil || len(p.Waiting) == 0 {
		return ""
	}
	for _, g := range p.Waiting[0].Gates {
		if !g.Open {
			return gateText(obj, g, time.Now())
		}
	}
	return ""
}

// upstreamName is the stage's upstream, "-" for a KCLArtifact that follows none.
func upstreamName(obj *kclv1.KCLArtifact) string {
	if obj.Spec.Promotion == nil {
		return "-"
	}
	f := obj.Spec.Promotion.From
	if f.Namespace != "" && f.Namespace != obj.Namespace {
		return f.Namespace + "/" + f.Name
	}
	return f.Name
}

// gateState is the Promoted condition's reason and, for a stage with an artifact waiting, what
// the newest waits for: "WaitingForSoak: soak 7m/10m". "-" for a KCLArtifact that is no stage.
func gateState(obj *kclv1.KCLArtifact) string {
	if obj.Spec.Promotion == nil {
		return "-"
	}
	state := "-"
	if c := apimeta.FindStatusCondition(obj.Status.Conditions, kclv1.PromotedCondition); c != nil {
		state = c.Reason
	}
	if gate := firstClosedGate(obj); gate != "" {
		state += ": " + gate
	}
	return state
}

// currentEntry is the history entry of the published artifact; history[0] when it is not listed.
func currentEntry(obj *kclv1.KCLArtifact) (kclv1.ArtifactHistoryEntry, bool) {
	h := obj.Status.History
	if len(h) == 0 {
		return kclv1.ArtifactHistoryEntry{}, false
	}
	if a := obj.Status.Artifact; a != nil {
		if i := slices.IndexFunc(h, func(e kclv1.ArtifactHistoryEntry) bool { return e.Digest == a.Digest }); i >= 0 {
			return h[i], true
		}
	}
	return h[0], true
}

// promotionText is a history entry's promotion record: "staging latest@sha256:12345678, approved
// by jane"; "-" for an entry published without one.
func promotionText(p *kclv1.PromotionRecord) string {
	if p == nil {
		return "-"
	}
	s := p.Upstream + " " + truncateHex(orDash(p.UpstreamRevision))
	if p.ApprovedBy != "" {
		s += ", approved by " + p.ApprovedBy
	}
	return s
}
