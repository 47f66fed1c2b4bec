package fluxkcl

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

func stageOf(name, from string) kclv1.KCLArtifact {
	obj := kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name}}
	if from != "" {
		obj.Spec.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: from}}
	}
	return obj
}

// Stages whose upstreams form a cycle are listed once each, marked, and the walk ends; a stage
// in a cycle asked by name is its chain's top.
func TestStageTreesWithACycle(t *testing.T) {
	items := []kclv1.KCLArtifact{stageOf("a", "c"), stageOf("b", "a"), stageOf("c", "b"), stageOf("dev", ""), stageOf("prod", "dev")}
	roots, err := stageTrees(items, "apps", "apps", nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, r := range roots {
		printTree(&b, r.tree())
	}
	want := `KCLArtifact/apps/dev runs nothing yet
└── KCLArtifact/apps/prod runs nothing yet, gate -
KCLArtifact/apps/a runs nothing yet, gate - (its upstreams form a cycle)
└── KCLArtifact/apps/b runs nothing yet, gate -
    └── KCLArtifact/apps/c runs nothing yet, gate -
`
	if b.String() != want {
		t.Errorf("stages:\n%s\nwant\n%s", b.String(), want)
	}
	roots, err = stageTrees(items, "apps", "apps", []string{"b"})
	if err != nil || len(roots) != 1 || roots[0].Name != "b" || !roots[0].Cycle || roots[0].Stages[0].Name != "c" {
		t.Errorf("the chain of b: %+v, %v", roots, err)
	}
}

// A gate message is a tenant's text as far as the terminal goes: one line, and the inputs shown
// leave out an ImagePolicy's image parts beside its tag, at most maxStageInputs of them.
func TestStageLinesAreOneLine(t *testing.T) {
	obj := stageOf("prod", "dev")
	obj.Status.Promotion = &kclv1.PromotionStatus{Waiting: []kclv1.WaitingArtifact{{Digest: digest("a"),
		Inputs: []kclv1.InputValue{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}, {Name: "c", Value: "3"}, {Name: "d", Value: "4"}, {Name: "e", Value: hostile},
			{Name: "web.image", Value: "x", From: "ImagePolicy/web"}, {Name: "web.tag", Value: "1.0", From: "ImagePolicy/web"}},
		Gates: []kclv1.GateStatus{{Name: kclv1.GateSoak, Message: hostile}}}}}
	var b bytes.Buffer
	printTree(&b, stageNodeOf(&obj).tree())
	if strings.Count(b.String(), "\n") != 2 || strings.ContainsAny(b.String(), "\x1b\x07\u009b\u202e") {
		t.Errorf("stage with a hostile gate message:\n%q", b.String())
	}
	if want := "waiting sha256:aaaaaaaa - (a=1, b=2, c=3, d=4, … (2 more)): "; !strings.Contains(b.String(), want) {
		t.Errorf("waiting line %q lacks %q", b.String(), want)
	}
	if got := gateState(&obj); !strings.HasPrefix(got, "-: ") {
		t.Errorf("gate without a Promoted condition: %q", got)
	}
}

// A gate says how far it is as of now, as the controller's message, written once, cannot.
func TestGateText(t *testing.T) {
	now := time.Date(2025, 3, 4, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: now.Add(d)} }
	obj := stageOf("prod", "dev")
	for _, c := range []struct {
		soak time.Duration
		gate kclv1.GateStatus
		want string
	}{
		{10 * time.Minute, kclv1.GateStatus{Name: kclv1.GateSoak, OpensAt: at(3*time.Minute - 20*time.Second)}, "soak 7m/10m"},
		{20 * time.Second, kclv1.GateStatus{Name: kclv1.GateSoak, OpensAt: at(8 * time.Second)}, "soak 12s/20s"},
		{90 * time.Minute, kclv1.GateStatus{Name: kclv1.GateSoak, OpensAt: at(time.Hour)}, "soak 30m/1h30m"},
		{2 * time.Hour, kclv1.GateStatus{Name: kclv1.GateSoak, OpensAt: at(-time.Minute)}, "soak 2h/2h"},
		{0, kclv1.GateStatus{Name: kclv1.GateSoak, Message: "soak starts once dev runs these inputs healthy"}, "soak starts once dev runs these inputs healthy"},
		{0, kclv1.GateStatus{Name: kclv1.GateWindow, OpensAt: at(2 * time.Hour)}, "outside window, opens 14:00 UTC"},
		{0, kclv1.GateStatus{Name: kclv1.GateWindow, OpensAt: at(50 * time.Hour)}, "outside window, opens 2025-03-06 14:00 UTC"},
		{0, kclv1.GateStatus{Name: kclv1.GateApproval, Message: "waiting for approval of " + digest("a")}, "waiting for approval"},
		{0, kclv1.GateStatus{Name: kclv1.GateUpstream, Message: "dev moved on to latest@" + digest("b") + ", which is Failed"}, "dev moved on to latest@sha256:bbbbbbbb, which is Failed"},
	} {
		obj.Spec.Promotion.Soak = &metav1.Duration{Duration: c.soak}
		if got := gateText(&obj, c.gate, now); got != c.want {
			t.Errorf("gate %s (soak %s): %q, want %q", c.gate.Name, c.soak, got, c.want)
		}
	}
}
