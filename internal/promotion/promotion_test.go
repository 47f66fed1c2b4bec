package promotion

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

func parse(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestWindows(t *testing.T) {
	g := NewWithT(t)
	ws, err := ParseWindows([]kclv1.PromotionWindow{
		{Schedule: "0 14 * * 1-5", Duration: metav1.Duration{Duration: 2 * time.Hour}},
	})
	g.Expect(err).NotTo(HaveOccurred())
	// Friday 2026-11-27
	for _, c := range []struct {
		now   string
		open  bool
		opens string
	}{
		{"2026-11-27T13:59:59Z", false, "2026-11-27T14:00:00Z"},
		{"2026-11-27T14:00:00Z", true, ""},
		{"2026-11-27T15:59:59Z", true, ""},
		{"2026-11-27T16:00:00Z", false, "2026-11-30T14:00:00Z"}, // the weekend is closed
	} {
		open, opens := WindowsOpen(ws, parse(c.now))
		g.Expect(open).To(Equal(c.open), c.now)
		if c.opens != "" {
			g.Expect(opens.UTC()).To(Equal(parse(c.opens)), c.now)
		}
	}

	berlin, err := ParseWindows([]kclv1.PromotionWindow{{Schedule: "0 9 * * *", TimeZone: "Europe/Berlin", Duration: metav1.Duration{Duration: time.Hour}}})
	g.Expect(err).NotTo(HaveOccurred())
	open, _ := WindowsOpen(berlin, parse("2026-11-27T08:30:00Z")) // 09:30 in Berlin (CET)
	g.Expect(open).To(BeTrue())

	open, _ = WindowsOpen(nil, parse("2026-11-27T08:30:00Z"))
	g.Expect(open).To(BeTrue(), "no windows is always open")
}

func TestBadWindowsSayWhy(t *testing.T) {
	g := NewWithT(t)
	for _, c := range []struct {
		w    kclv1.PromotionWindow
		want string
	}{
		{kclv1.PromotionWindow{Schedule: "61 * * * *", Duration: metav1.Duration{Duration: time.Minute}}, `spec.promotion.windows[0] ("61 * * * *"): end of range (61) above maximum (59)`},
		{kclv1.PromotionWindow{Schedule: "every day", Duration: metav1.Duration{Duration: time.Minute}}, `spec.promotion.windows[0] ("every day")`},
		{kclv1.PromotionWindow{Schedule: "@daily", Duration: metav1.Duration{}}, "duration 0s is not between 0 and 168h0m0s"},
		{kclv1.PromotionWindow{Schedule: "@daily", Duration: metav1.Duration{Duration: time.Hour}, TimeZone: "Mars/Olympus"}, "timeZone: unknown time zone Mars/Olympus"},
		{kclv1.PromotionWindow{Schedule: "CRON_TZ=UTC @daily", Duration: metav1.Duration{Duration: time.Hour}}, "the time zone goes in timeZone"},
	} {
		_, err := ParseWindows([]kclv1.PromotionWindow{c.w})
		g.Expect(err).To(MatchError(ContainSubstring(c.want)))
	}
}

func healthy(digest, rev, at string, inputs ...kclv1.InputValue) kclv1.ArtifactHistoryEntry {
	t := metav1.NewTime(time.Time{})
	if at != "" {
		t = metav1.NewTime(parse(at))
	}
	return kclv1.ArtifactHistoryEntry{Digest: digest, Revision: "main@" + digest, SourceRevision: rev, Health: kclv1.HealthHealthy, HealthyAt: &t, Inputs: inputs}
}

func tag(v string) kclv1.InputValue {
	return kclv1.InputValue{Name: "web.tag", Value: v, From: "ImagePolicy/web"}
}

func TestGates(t *testing.T) {
	g := NewWithT(t)
	now := parse("2026-11-27T10:10:00Z")
	up := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "staging"}}
	up.Status.History = []kclv1.ArtifactHistoryEntry{healthy("sha256:b", "main@sha1:2", "2026-11-27T10:05:00Z", tag("1.2"))}
	w := kclv1.WaitingArtifact{Digest: "sha256:p", SourceRevision: "main@sha1:2",
		Inputs: []kclv1.InputValue{tag("1.2"), {Name: "replicas", Value: "3"}}}
	s := Stage{Spec: kclv1.Promotion{From: kclv1.UpstreamReference{Name: "staging"}, Soak: &metav1.Duration{Duration: 10 * time.Minute}, Approval: kclv1.ApprovalRequired},
		Upstream: up, UpstreamName: "staging", Now: now}

	v := s.Evaluate(w)
	g.Expect(v.Open).To(BeFalse())
	g.Expect(v.Reason).To(Equal(kclv1.WaitingForSoakReason))
	g.Expect(v.Retry).To(Equal(parse("2026-11-27T10:15:01Z")), "healthyAt is in whole seconds: a second more")
	g.Expect(v.Gates).To(HaveLen(3))
	g.Expect(v.Gates[0].Open).To(BeTrue())

	s.Now = parse("2026-11-27T10:15:01Z")
	v = s.Evaluate(w)
	g.Expect(v.Reason).To(Equal(kclv1.WaitingForApprovalReason))
	s.Approved, s.ApprovedBy = "sha256:p", "alice"
	g.Expect(s.Evaluate(w).Open).To(BeTrue())

	// another tag upstream: not the same inputs
	w2 := w
	w2.Inputs = []kclv1.InputValue{tag("1.3")}
	g.Expect(s.Evaluate(w2).Message).To(Equal("staging has not run main@sha1:2 with these inputs yet"))

	// replaced by a newer artifact not healthy yet: wait; failed: never
	up.Status.History = append([]kclv1.ArtifactHistoryEntry{{Digest: "sha256:c", Revision: "main@sha256:c", SourceRevision: "main@sha1:3", Health: kclv1.HealthProgressing}}, up.Status.History...)
	v = s.Evaluate(w)
	g.Expect(v.Reason).To(Equal(kclv1.UpstreamNotHealthyReason))
	g.Expect(v.Message).To(Equal("staging moved on to main@sha256:c, which is not healthy yet"))
	up.Status.History[0].Health = kclv1.HealthHealthy
	g.Expect(s.Evaluate(w).Open).To(BeTrue(), "replaced by a newer healthy one")
	up.Status.History[1].Health = kclv1.HealthFailed
	v = s.Evaluate(w)
	g.Expect(v.Never).To(BeTrue())
	g.Expect(v.Reason).To(Equal(kclv1.UpstreamFailedReason))

	s.Upstream = nil
	g.Expect(s.Evaluate(w).Reason).To(Equal(kclv1.UpstreamNotFoundReason))
}

// A gate's Since moves only when it opens or closes: waiting writes nothing new to status.
func TestCarryKeepsSince(t *testing.T) {
	g := NewWithT(t)
	t0, t1 := parse("2026-11-27T10:00:00Z"), parse("2026-11-27T10:05:00Z")
	first := Carry(nil, []kclv1.GateStatus{{Name: kclv1.GateSoak}}, t0)
	again := Carry(first, []kclv1.GateStatus{{Name: kclv1.GateSoak}}, t1)
	g.Expect(again[0].Since.Time).To(Equal(t0))
	opened := Carry(again, []kclv1.GateStatus{{Name: kclv1.GateSoak, Open: true}}, t1)
	g.Expect(opened[0].Since.Time).To(Equal(t1))
}

// After the upstream ran the inputs healthy and moved on to a release that failed, and rolled back
// to them (an entry of the same inputs, not healthy yet), the soak and verified gates say what the
// upstream ran, held by the upstream gate, not that it has yet to run it.
func TestGatesAfterARollbackSayWhatTheUpstreamRan(t *testing.T) {
	g := NewWithT(t)
	up := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "staging"}}
	ran := healthy("sha256:b", "main@sha1:2", "2026-11-27T10:05:00Z", tag("1.2"))
	ran.Verification = &kclv1.Verification{Result: kclv1.VerificationPassed}
	up.Status.History = []kclv1.ArtifactHistoryEntry{
		// the rollback to release 2, applied but not healthy yet
		{Digest: "sha256:b", Revision: "main@sha256:b", SourceRevision: "main@sha1:2", Health: kclv1.HealthProgressing, Inputs: []kclv1.InputValue{tag("1.2")}},
		{Digest: "sha256:c", Revision: "main@sha256:c", SourceRevision: "main@sha1:3", Health: kclv1.HealthFailed},
		ran,
	}
	w := kclv1.WaitingArtifact{Digest: "sha256:p", SourceRevision: "main@sha1:2", Inputs: []kclv1.InputValue{tag("1.2")}}
	s := Stage{Spec: kclv1.Promotion{From: kclv1.UpstreamReference{Name: "staging"}, Soak: &metav1.Duration{Duration: 10 * time.Minute}},
		Upstream: up, UpstreamName: "staging", UpstreamVerifies: true, Now: parse("2026-11-27T10:30:00Z")}

	v := s.Evaluate(w)
	g.Expect(v.Reason).To(Equal(kclv1.UpstreamNotHealthyReason))
	g.Expect(v.Gates).To(HaveLen(3))
	g.Expect(v.Gates[1].Name).To(Equal(kclv1.GateSoak))
	g.Expect(v.Gates[1].Message).To(Equal("soak 10m0s of staging's main@sha256:b counts from 2026-11-27T10:05:00Z; " +
		"staging ran these inputs healthy (main@sha256:b), then moved on: held by the upstream gate"))
	g.Expect(v.Gates[2].Name).To(Equal(kclv1.GateVerified))
	g.Expect(v.Gates[2].Message).To(Equal("staging passed its checks on main@sha256:b; " +
		"staging ran these inputs healthy (main@sha256:b), then moved on: held by the upstream gate"))
	for _, gs := range v.Gates {
		g.Expect(gs.Message).NotTo(ContainSubstring("starts once"))
	}

	// never run: the gates still wait for it
	w.SourceRevision = "main@sha1:4"
	v = s.Evaluate(w)
	g.Expect(v.Gates[1].Message).To(Equal("soak 10m0s starts once staging runs these inputs healthy"))
	g.Expect(v.Gates[2].Message).To(Equal("staging's checks start once it runs these inputs healthy"))
}
