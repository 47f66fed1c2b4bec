package promotion

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputchange"
)

// Stage is what the gates of a stage read besides the waiting artifact.
type Stage struct {
	Spec    kclv1.Promotion
	Windows []Window
	// Upstream is the upstream KCLArtifact; nil when it does not exist. UpstreamName is how the
	// gates' messages name it: with its namespace when that is not the stage's.
	Upstream     *kclv1.KCLArtifact
	UpstreamName string
	// Approved is the digest the approve annotation names, ApprovedBy who approved it, and
	// Exemption why it may pass a stopped line ("": it may not).
	Approved, ApprovedBy, Exemption string
	// Line is the stop of the line that holds this stage; nil while the line runs.
	Line *Stop
	// Rejections are the releases rejected in the stage's pipeline: never promoted.
	Rejections []Rejection
	// UpstreamVerifies: the upstream has spec.verify, and only inputs its checks passed go on.
	UpstreamVerifies bool
	Now              time.Time
}

// Stop is a stopped line: who stopped it, why, since when, and where (the stage's namespace, or
// every namespace).
type Stop struct {
	Scope, Reason, By string
	// At is when it was stopped; zero when the annotation does not say.
	At time.Time
}

func (s Stop) String() string {
	msg := fmt.Sprintf("the line is stopped (%s) by %s", s.Scope, cmp.Or(s.By, "someone unnamed"))
	if !s.At.IsZero() {
		msg += " at " + stamp(s.At)
	}
	return msg + ": " + cmp.Or(s.Reason, "no reason given")
}

// Verdict is the gates' state for one waiting artifact.
type Verdict struct {
	Gates []kclv1.GateStatus
	// Open: every gate lets it through.
	Open bool
	// Never: the upstream saw its inputs fail; it is never published.
	Never bool
	// Reason and Message of the first closed gate (a Promoted condition's).
	Reason, Message string
	// Proof is the upstream's history entry that ran the same inputs healthy.
	Proof *kclv1.ArtifactHistoryEntry
	// ran is the upstream's entry that ran the same inputs healthy when the upstream has moved on
	// since to one not healthy (a failed release, a rollback): no proof, but the soak and
	// verified gates say what it ran, not that it has yet to.
	ran *kclv1.ArtifactHistoryEntry
	// Retry is when a closed gate opens by itself (zero: only an event opens it).
	Retry time.Time
	// Exemption is why an approver let it through the stopped line ("": the line runs, or it
	// was not exempted).
	Exemption string
}

// Evaluate passes a waiting artifact through the gates, in order: rejected (when its release
// was rejected), line (while it is stopped), upstream, soak, window, approval. Each gate is listed (those configured), so status shows all
// of them at once.
func (s Stage) Evaluate(w kclv1.WaitingArtifact) Verdict {
	var v Verdict
	if r := Rejected(s.Rejections, w.SourceRevision, w.Inputs); r != nil {
		v.Never = true
		v.add(closed(kclv1.GateRejected, kclv1.ReleaseRejectedReason, "%s: it is never promoted", r), kclv1.ReleaseRejectedReason)
	}
	if s.Line != nil {
		v.add(s.lineGate(w), kclv1.LineStoppedReason)
		if s.Exempted(w) {
			v.Exemption = s.Exemption
		}
	}
	up := s.upstreamGate(w, &v)
	v.add(up, kclv1.UpstreamNotHealthyReason)
	if s.Spec.Soak != nil {
		v.add(s.soakGate(v.Proof, v.ran), kclv1.WaitingForSoakReason)
	}
	if s.UpstreamVerifies {
		v.add(s.verifiedGate(v.Proof, v.ran), kclv1.WaitingForVerificationReason)
	}
	if len(s.Windows) > 0 {
		v.add(s.windowGate(), kclv1.OutsideWindowReason)
	}
	if s.Spec.Approval == kclv1.ApprovalRequired {
		v.add(s.approvalGate(w), kclv1.WaitingForApprovalReason)
	}
	v.Open = v.Reason == ""
	return v
}

// gate is a gate's state and, closed, its reason when it is not the default one.
type gate struct {
	kclv1.GateStatus
	reason string
}

func (v *Verdict) add(g gate, reason string) {
	v.Gates = append(v.Gates, g.GateStatus)
	if g.Open || v.Reason != "" {
		return
	}
	v.Reason, v.Message = reason, g.Message
	if g.reason != "" {
		v.Reason = g.reason
	}
	if g.OpensAt != nil && (v.Retry.IsZero() || g.OpensAt.Time.Before(v.Retry)) {
		v.Retry = g.OpensAt.Time
	}
}

func closed(name, reason, format string, args ...any) gate {
	return gate{GateStatus: kclv1.GateStatus{Name: name, Message: fmt.Sprintf(format, args...)}, reason: reason}
}

func opened(name, format string, args ...any) gate {
	return gate{GateStatus: kclv1.GateStatus{Name: name, Open: true, Message: fmt.Sprintf(format, args...)}}
}

// upstreamGate looks in the upstream's history for the waiting artifact's inputs: run healthy,
// and still current or replaced only by healthy artifacts. Inputs the upstream saw fail, roll
// back or be quarantined close it for good.
func (s Stage) upstreamGate(w kclv1.WaitingArtifact, v *Verdict) gate {
	up := s.Upstream
	if up == nil {
		return closed(kclv1.GateUpstream, kclv1.UpstreamNotFoundReason, "the upstream KCLArtifact %s does not exist", s.UpstreamName)
	}
	h := up.Status.History
	proof := -1
	for i, e := range h {
		if !SameInputs(w, e) {
			continue
		}
		if e.Health == kclv1.HealthFailed || quarantined(up, e.Digest) || FailedVerification(e) {
			v.Never = true
			return closed(kclv1.GateUpstream, kclv1.UpstreamFailedReason, "%s saw these inputs fail (%s): they are never promoted", up.Name, e.Revision)
		}
		if proof < 0 && e.Health == kclv1.HealthHealthy && e.HealthyAt != nil {
			proof = i
		}
	}
	if proof < 0 {
		return closed(kclv1.GateUpstream, "", "%s", notRunHealthy(up, w))
	}
	for _, e := range h[:proof] {
		if e.Health != kclv1.HealthHealthy && e.Health != kclv1.HealthNotApplied {
			v.ran = &h[proof]
			return closed(kclv1.GateUpstream, "", "%s moved on to %s, which is %s", up.Name, e.Revision, healthWord(e.Health))
		}
	}
	if h[0].Health != kclv1.HealthHealthy {
		v.ran = &h[proof]
		return closed(kclv1.GateUpstream, "", "%s moved on to %s, which is %s", up.Name, h[0].Revision, healthWord(h[0].Health))
	}
	v.Proof = &h[proof]
	return opened(kclv1.GateUpstream, "%s runs these inputs healthy since %s (%s)", up.Name, stamp(h[proof].HealthyAt.Time), h[proof].Revision)
}

func notRunHealthy(up *kclv1.KCLArtifact, w kclv1.WaitingArtifact) string {
	if !up.KustomizationEnabled() {
		return fmt.Sprintf("%s generates no Kustomization: nothing proves its artifacts healthy", up.Name)
	}
	for _, e := range up.Status.History {
		if SameInputs(w, e) {
			return fmt.Sprintf("%s runs these inputs (%s), %s", up.Name, e.Revision, healthWord(e.Health))
		}
	}
	return fmt.Sprintf("%s has not run %s with these inputs yet", up.Name, w.SourceRevision)
}

func healthWord(h string) string {
	switch h {
	case "":
		return "of unknown health"
	case kclv1.HealthProgressing:
		return "not healthy yet"
	}
	return h
}

func quarantined(up *kclv1.KCLArtifact, digest string) bool {
	r := up.Status.Remediation
	return r != nil && r.Quarantined != nil && r.Quarantined.Digest == digest
}

// movedOn ends the message of a gate that the upstream gate holds: the upstream ran the inputs
// healthy (ran), then moved on to an artifact not healthy.
func (s Stage) movedOn(ran *kclv1.ArtifactHistoryEntry) string {
	return fmt.Sprintf("; %s ran these inputs healthy (%s), then moved on: held by the upstream gate", s.UpstreamName, ran.Revision)
}

func (s Stage) soakGate(proof, ran *kclv1.ArtifactHistoryEntry) gate {
	soak := s.Spec.Soak.Duration
	if proof == nil && ran != nil {
		return closed(kclv1.GateSoak, "", "soak %s of %s's %s counts from %s%s",
			soak, s.UpstreamName, ran.Revision, stamp(ran.HealthyAt.Time), s.movedOn(ran))
	}
	if proof == nil {
		return closed(kclv1.GateSoak, "", "soak %s starts once %s runs these inputs healthy", soak, s.UpstreamName)
	}
	// healthyAt is kept in whole seconds: the artifact became healthy up to a second after it
	// says, and a soak is a lower bound
	ends := proof.HealthyAt.Add(soak + time.Second)
	if s.Now.Before(ends) {
		g := closed(kclv1.GateSoak, "", "soak %s of %s's %s: healthy since %s, ends at %s",
			soak, s.UpstreamName, proof.Revision, stamp(proof.HealthyAt.Time), stamp(ends))
		g.OpensAt = &metav1.Time{Time: ends}
		return g
	}
	return opened(kclv1.GateSoak, "soaked %s in %s", soak, s.UpstreamName)
}

// verifiedGate opens once the upstream's checks (spec.verify) passed on the artifact that proves
// the inputs; it opens on the upstream's news, not by a clock.
func (s Stage) verifiedGate(proof, ran *kclv1.ArtifactHistoryEntry) gate {
	if proof == nil && ran == nil {
		return closed(kclv1.GateVerified, "", "%s's checks start once it runs these inputs healthy", s.UpstreamName)
	}
	if proof == nil {
		// what the upstream's checks said of the inputs it ran, held by the upstream gate
		v := ran.Verification
		switch {
		case v != nil && v.Result == kclv1.VerificationPassed:
			return closed(kclv1.GateVerified, "", "%s passed its checks on %s%s", s.UpstreamName, ran.Revision, s.movedOn(ran))
		case v == nil:
			return closed(kclv1.GateVerified, "", "%s did not check %s%s", s.UpstreamName, ran.Revision, s.movedOn(ran))
		}
		return closed(kclv1.GateVerified, "", "%s was checking %s, without a verdict yet%s", s.UpstreamName, ran.Revision, s.movedOn(ran))
	}
	v := proof.Verification
	if v != nil && v.Result == kclv1.VerificationPassed {
		return opened(kclv1.GateVerified, "%s passed its checks on %s", s.UpstreamName, proof.Revision)
	}
	if v == nil {
		return closed(kclv1.GateVerified, "", "%s has not checked %s yet", s.UpstreamName, proof.Revision)
	}
	msg := fmt.Sprintf("%s checks %s until %s", s.UpstreamName, proof.Revision, stamp(v.EndsAt.Time))
	for _, c := range v.Checks {
		if c.Verdict != "Passed" {
			// what holds it now: a failing check, or metrics that cannot be read
			msg += fmt.Sprintf(" (check %s: %s)", c.Name, strings.ToLower(c.Verdict))
			break
		}
	}
	return closed(kclv1.GateVerified, "", "%s", msg)
}

// FailedVerification tells whether the checks of spec.verify failed e's artifact.
func FailedVerification(e kclv1.ArtifactHistoryEntry) bool {
	return e.Verification != nil && e.Verification.Result == kclv1.VerificationFailed
}

func (s Stage) windowGate() gate {
	open, opens := WindowsOpen(s.Windows, s.Now)
	if open {
		return opened(kclv1.GateWindow, "a window is open")
	}
	g := closed(kclv1.GateWindow, "", "outside the windows; the next opens at %s", stamp(opens))
	g.OpensAt = &metav1.Time{Time: opens}
	return g
}

// lineGate holds everything while the line is stopped, but the artifact an approver exempted.
func (s Stage) lineGate(w kclv1.WaitingArtifact) gate {
	if s.Exempted(w) {
		return opened(kclv1.GateLine, "%s; exempted by %s: %s", s.Line, ApproverName(s.ApprovedBy), s.Exemption)
	}
	return closed(kclv1.GateLine, "", "%s; an approver lets one artifact through with flux kcl approve --exemption", s.Line)
}

// Exempted tells whether w passes a stopped line: approved by digest, with a reason.
func (s Stage) Exempted(w kclv1.WaitingArtifact) bool {
	return s.Line != nil && s.Exemption != "" && s.Approved == w.Digest
}

func (s Stage) approvalGate(w kclv1.WaitingArtifact) gate {
	if s.Approved == w.Digest {
		return opened(kclv1.GateApproval, "approved by %s", ApproverName(s.ApprovedBy))
	}
	return closed(kclv1.GateApproval, "", "waiting for approval of %s (flux kcl approve, or the annotation %s)", w.Digest, kclv1.ApproveAnnotation)
}

// ApproverName is who approved, as the annotation says; the approval annotation alone names nobody.
func ApproverName(by string) string {
	if by == "" {
		return "an unnamed approver (" + kclv1.ApproveAnnotation + " without " + kclv1.ApprovedByAnnotation + ")"
	}
	return by
}

// SameInputs tells whether an upstream history entry ran a waiting artifact's inputs: the same
// source revision, and the same values of the inputs both read from the same object under the
// same name. The stage's own arguments, and Secret values (masked), are not compared.
func SameInputs(w kclv1.WaitingArtifact, e kclv1.ArtifactHistoryEntry) bool {
	if w.SourceRevision != e.SourceRevision {
		return false
	}
	for _, a := range w.Inputs {
		if a.From == "" || a.Value == inputchange.Masked {
			continue
		}
		for _, b := range e.Inputs {
			if b.From == a.From && b.Name == a.Name && b.Value != inputchange.Masked && b.Value != a.Value {
				return false
			}
		}
	}
	return true
}

// Carry keeps each gate's Since from the previous evaluation while the gate stays open or
// closed, so that status says since when it waits (and writes nothing new while it waits).
func Carry(prev, next []kclv1.GateStatus, now time.Time) []kclv1.GateStatus {
	for i := range next {
		next[i].Since = &metav1.Time{Time: now.Truncate(time.Second)}
		for _, p := range prev {
			if p.Name == next[i].Name && p.Open == next[i].Open && p.Since != nil {
				next[i].Since = p.Since
			}
		}
	}
	return next
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
