package fluxplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// The promotion views against a kube-apiserver without controllers: dev → staging → production
// with the status the controller writes (fixtures), and approve's writes.

const (
	digestD = "sha256:dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"
	digestE = "sha256:eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"
	srcOld  = "main@sha1:1111111111111111111111111111111111111111"
	srcNew  = "main@sha1:2222222222222222222222222222222222222222"
)

// windowOpens is when the window of the canary stage opens, as the views say it.
var windowOpens string

// webInputs are the inputs of a stage at an ImagePolicy's tag, with its own replicas.
func webInputs(tag, replicas string) []kclv1.InputValue {
	return []kclv1.InputValue{
		{Name: "replicas", Value: replicas},
		{Name: "web.digest", Value: digestE, From: "ImagePolicy/web"},
		{Name: "web.image", Value: "ghcr.io/acme/web:" + tag + "@" + digestE, From: "ImagePolicy/web"},
		{Name: "web.tag", Value: tag, From: "ImagePolicy/web"},
	}
}

func TestPromotionVerbs(t *testing.T) {
	fluxBinary(t)
	cfg, kc := startClusterConfig(t)
	ctx := context.Background()
	installCRDs(t, cfg)
	c := newClient(t, cfg)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}); err != nil {
		t.Fatal(err)
	}
	createStages(t, c)

	t.Run("get", func(t *testing.T) { testGetStages(t, kc) })
	t.Run("tree --stages", func(t *testing.T) { testTreeStages(t, kc) })
	t.Run("approve refusals", func(t *testing.T) { testApproveRefusals(t, c, kc) })
	t.Run("approve", func(t *testing.T) { testApprove(t, c, kc) })
	t.Run("approve completion", func(t *testing.T) {
		comps, directive := completions(t, flux(t, kc, "__complete", "-n", "apps", "kcl", "approve", "production", "sha256:d"))
		if directive != ":4" || len(comps) != 1 || comps[0] != digestD+"\tmain@sha1:11111111 (replicas=5, web.tag=1.4.2)" {
			t.Errorf("completion of the digest: %q %s; want %s with what it runs", comps, directive, digestD)
		}
	})
	t.Run("history", func(t *testing.T) {
		r := flux(t, kc, "kcl", "history", "staging", "-n", "apps")
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		if r.code != 0 || len(lines) != 3 {
			t.Fatalf("history of staging: exit %d, stdout\n%s", r.code, r.stdout)
		}
		for i, want := range [][2]string{{"PROMOTED FROM", "INPUTS"}, {"dev latest@sha256:aaaaaaaa, approved by jane", "web.tag 1.4.2 → 1.4.3"}, {"-", "-"}} {
			if got := cells(lines[i]); len(got) != 8 || got[6] != want[0] || got[7] != want[1] {
				t.Errorf("history row %q: want the last two columns %q", lines[i], want)
			}
		}
	})
	t.Run("stop-line, approve --exemption, resume-line", func(t *testing.T) { testLine(t, c, kc) })
	t.Run("reject, unreject", func(t *testing.T) { testReject(t, c, kc) })
	t.Run("verified", func(t *testing.T) { testVerified(t, c, kc) })
	// last: it takes the right to ask who one is from every user of this API server
	t.Run("approve without SelfSubjectReview", func(t *testing.T) { testApproveFallback(t, c, kc) })
}

// createStages creates dev (no upstream) → staging (soak) → production (approval), a stage
// alone whose upstream does not exist, and plain, which is in no chain.
func createStages(t *testing.T, c client.Client) {
	t.Helper()
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	entry := func(d, src string, inputs []kclv1.InputValue) kclv1.ArtifactHistoryEntry {
		return kclv1.ArtifactHistoryEntry{Digest: d, Revision: "latest@" + d, SourceRevision: src, URL: "http://x/" + d[7:15] + ".tar.gz",
			Objects: 2, LastPublished: now, Health: kclv1.HealthHealthy, HealthyAt: &now, Inputs: inputs}
	}
	promoted := func(status metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: kclv1.PromotedCondition, Status: status, Reason: reason, Message: msg, LastTransitionTime: now}
	}
	stage := func(name, from string, p *kclv1.Promotion, st kclv1.KCLArtifactStatus) {
		obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps"},
			Spec: kclv1.KCLArtifactSpec{SourceRef: kclv1.SourceReference{Kind: "GitRepository", Name: "web"},
				Interval: metav1.Duration{Duration: time.Minute}, Promotion: p}}
		if p != nil {
			p.From.Name = from
		}
		if err := c.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
		if len(st.History) > 0 {
			st.Artifact = &meta.Artifact{Path: "x", URL: st.History[0].URL, Revision: st.History[0].Revision, Digest: st.History[0].Digest, LastUpdateTime: now}
		}
		st.ObservedGeneration = obj.Generation
		obj.Status = st
		if err := c.Status().Update(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	}
	stage("dev", "", nil, kclv1.KCLArtifactStatus{History: []kclv1.ArtifactHistoryEntry{entry(digestA, srcNew, webInputs("1.4.3", "1"))}})
	stagingNew := entry(digestB, srcNew, webInputs("1.4.3", "2"))
	stagingNew.Promotion = &kclv1.PromotionRecord{Upstream: "dev", UpstreamRevision: "latest@" + digestA, ApprovedBy: "jane"}
	stage("staging", "dev", &kclv1.Promotion{Soak: &metav1.Duration{Duration: 10 * time.Minute}}, kclv1.KCLArtifactStatus{
		History:    []kclv1.ArtifactHistoryEntry{stagingNew, entry(digestA, srcOld, webInputs("1.4.2", "2"))},
		Conditions: []metav1.Condition{promoted(metav1.ConditionTrue, kclv1.PromotedReason, "serving the newest")},
	})
	waiting := func(d, src string, inputs []kclv1.InputValue) kclv1.WaitingArtifact {
		return kclv1.WaitingArtifact{Digest: d, Revision: "latest@" + d, SourceRevision: src, URL: "http://x/" + d[7:15] + ".tar.gz",
			Objects: 2, InputDigest: "sha256:in", RenderedAt: now, Inputs: inputs, Gates: []kclv1.GateStatus{
				{Name: kclv1.GateUpstream, Open: true, Since: &now},
				{Name: kclv1.GateApproval, Open: false, Since: &now, Message: "waiting for approval"}}}
	}
	stage("production", "staging", &kclv1.Promotion{Approval: kclv1.ApprovalRequired}, kclv1.KCLArtifactStatus{
		History: []kclv1.ArtifactHistoryEntry{entry(digestC, srcOld, webInputs("1.4.1", "5"))},
		Promotion: &kclv1.PromotionStatus{Upstream: "staging", Waiting: []kclv1.WaitingArtifact{
			waiting(digestE, srcNew, webInputs("1.4.3", "5")), waiting(digestD, srcOld, webInputs("1.4.2", "5"))}},
		Conditions: []metav1.Condition{promoted(metav1.ConditionFalse, kclv1.WaitingForApprovalReason, "waiting for approval")},
	})
	// canary soaks dev's artifact 7 minutes of 10, and its window opens in two hours
	soaked, opens := metav1.NewTime(now.Add(3*time.Minute)), metav1.NewTime(now.Add(2*time.Hour))
	canaryWaits := waiting(digestD, srcNew, webInputs("1.4.3", "1"))
	canaryWaits.Gates = []kclv1.GateStatus{{Name: kclv1.GateUpstream, Open: true, Since: &now},
		{Name: kclv1.GateSoak, Since: &now, OpensAt: &soaked, Message: "soak 10m0s of dev's latest@" + digestA + ": healthy since …"},
		{Name: kclv1.GateWindow, Since: &now, OpensAt: &opens, Message: "outside the windows; the next opens at …"}}
	stage("canary", "dev", &kclv1.Promotion{Soak: &metav1.Duration{Duration: 10 * time.Minute},
		Windows: []kclv1.PromotionWindow{{Schedule: "0 * * * *", Duration: metav1.Duration{Duration: time.Minute}}}}, kclv1.KCLArtifactStatus{
		Promotion:  &kclv1.PromotionStatus{Upstream: "dev", Waiting: []kclv1.WaitingArtifact{canaryWaits}},
		Conditions: []metav1.Condition{promoted(metav1.ConditionFalse, kclv1.WaitingForSoakReason, "soak 10m0s of dev's …")},
	})
	windowOpens = opens.UTC().Format("15:04 UTC")
	stage("orphan", "gone", &kclv1.Promotion{}, kclv1.KCLArtifactStatus{
		Conditions: []metav1.Condition{promoted(metav1.ConditionFalse, kclv1.UpstreamNotFoundReason, "KCLArtifact gone not found")}})
	stage("plain", "", nil, kclv1.KCLArtifactStatus{})
}

func testGetStages(t *testing.T, kc string) {
	r := flux(t, kc, "kcl", "get", "-n", "apps")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 7 {
		t.Fatalf("get: exit %d, %d lines; want a header and 6 rows", r.code, len(lines))
	}
	if got := strings.Join(strings.Fields(lines[0]), " "); got != "NAME REVISION SUSPENDED READY APPLIED PHASE ROLLBACK UPSTREAM GATE MESSAGE" {
		t.Errorf("header %q", got)
	}
	for i, want := range [][3]string{
		{"canary", "dev", "WaitingForSoak: soak 7m/10m"},
		{"dev", "-", "-"},
		{"orphan", "gone", "UpstreamNotFound"},
		{"plain", "-", "-"},
		{"production", "staging", "WaitingForApproval: waiting for approval"},
		{"staging", "dev", "Promoted"},
	} {
		if got := cells(lines[i+1]); len(got) != 10 || got[0] != want[0] || got[7] != want[1] || got[8] != want[2] {
			t.Errorf("row %q: want name, upstream and gate %q", lines[i+1], want)
		}
	}
	// without a stage listed, the table keeps the columns it always had
	r = flux(t, kc, "kcl", "get", "plain", "-n", "apps")
	if got := strings.Join(strings.Fields(strings.SplitN(r.stdout, "\n", 2)[0]), " "); got != "NAME REVISION SUSPENDED READY APPLIED PHASE ROLLBACK MESSAGE" {
		t.Errorf("get plain: header %q", got)
	}
}

func testTreeStages(t *testing.T, kc string) {
	want := `KCLArtifact/apps/dev runs main@sha1:22222222 (replicas=1, web.tag=1.4.3), Healthy
├── KCLArtifact/apps/canary runs nothing yet, gate WaitingForSoak: soak 7m/10m
│   └── waiting sha256:dddddddd main@sha1:22222222 (replicas=1, web.tag=1.4.3): soak 7m/10m; outside window, opens ` + windowOpens + `
└── KCLArtifact/apps/staging runs main@sha1:22222222 (replicas=2, web.tag=1.4.3), Healthy, gate Promoted
    └── KCLArtifact/apps/production runs main@sha1:11111111 (replicas=5, web.tag=1.4.1), Healthy, gate WaitingForApproval: waiting for approval
        ├── waiting sha256:eeeeeeee main@sha1:22222222 (replicas=5, web.tag=1.4.3): waiting for approval
        └── waiting sha256:dddddddd main@sha1:11111111 (replicas=5, web.tag=1.4.2): waiting for approval
KCLArtifact/apps/orphan runs nothing yet, gate UpstreamNotFound
`
	r := flux(t, kc, "kcl", "tree", "--stages", "-n", "apps")
	if r.code != 0 || r.stdout != want {
		t.Errorf("tree --stages: exit %d, stdout\n%s\nwant\n%s", r.code, r.stdout, want)
	}
	// one stage's chain, from the top
	r = flux(t, kc, "kcl", "tree", "--stages", "production", "-n", "apps")
	if chain := want[:strings.Index(want, "KCLArtifact/apps/orphan")]; r.code != 0 || r.stdout != chain {
		t.Errorf("tree --stages production: exit %d, stdout\n%s\nwant\n%s", r.code, r.stdout, chain)
	}
	r = flux(t, kc, "kcl", "tree", "--stages", "staging", "-n", "apps", "-o", "yaml")
	if r.code != 0 || !strings.Contains(r.stdout, "gate: 'WaitingForApproval: waiting for approval'\n") ||
		!strings.Contains(r.stdout, "waitsFor: waiting for approval") {
		t.Errorf("tree --stages -o yaml: exit %d, stdout\n%s", r.code, r.stdout)
	}
	oneFailure(t, flux(t, kc, "kcl", "tree", "--stages", "plain", "-n", "apps"),
		"KCLArtifact plain is in no chain of stages: it has no spec.promotion and no stage follows it")
	oneFailure(t, flux(t, kc, "kcl", "tree", "-n", "apps"), "give a KCLArtifact name, or --stages")
}

// annotations reads name's approval annotations.
func annotations(t *testing.T, c client.Client, name string) map[string]string {
	t.Helper()
	obj := &kclv1.KCLArtifact{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "apps", Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	return obj.Annotations
}

func testApproveRefusals(t *testing.T, c client.Client, kc string) {
	oneFailure(t, flux(t, kc, "kcl", "approve", "plain", "-n", "apps"),
		"KCLArtifact plain in apps namespace is not a stage (no spec.promotion): nothing to approve")
	oneFailure(t, flux(t, kc, "kcl", "approve", "staging", "-n", "apps"),
		"KCLArtifact staging in apps namespace has no artifact waiting to be published: nothing to approve")
	oneFailure(t, flux(t, kc, "kcl", "approve", "production", digestC, "-n", "apps"),
		"digest "+digestC+" is not waiting in KCLArtifact production; waiting: "+digestE+", "+digestD)
	oneFailure(t, flux(t, kc, "kcl", "approve", "nope", "-n", "apps"), "KCLArtifact object 'nope' not found in apps namespace")
	for _, name := range []string{"plain", "staging", "production"} {
		if a := annotations(t, c, name); a[kclv1.ApproveAnnotation] != "" || a[kclv1.ApprovedByAnnotation] != "" {
			t.Errorf("a refused approval annotated %s: %v", name, a)
		}
	}
}

func testApprove(t *testing.T, c client.Client, kc string) {
	before := time.Now().Add(-time.Second)
	r := flux(t, kc, "kcl", "approve", "production", "-n", "apps")
	wantOut := "KCLArtifact apps/production: approved\n" +
		"  digest:          " + digestE + "\n" +
		"  revision:        latest@" + digestE + "\n" +
		"  source revision: " + srcNew + "\n" +
		"  inputs:          replicas=5, web.tag=1.4.3\n" +
		"  approved by:     flux-kcl\n"
	wantErr := "► approving " + digestE + " of KCLArtifact production in apps namespace as flux-kcl\n" +
		"✔ KCLArtifact production: " + digestE + " approved by flux-kcl\n"
	if r.code != 0 || r.stdout != wantOut || r.stderr != wantErr {
		t.Errorf("approve production: exit %d, stdout\n%s\nstderr\n%s\nwant stdout\n%s\nstderr\n%s", r.code, r.stdout, r.stderr, wantOut, wantErr)
	}
	a := annotations(t, c, "production")
	requested, err := time.Parse(time.RFC3339Nano, a[meta.ReconcileRequestAnnotation])
	if a[kclv1.ApproveAnnotation] != digestE || a[kclv1.ApprovedByAnnotation] != "flux-kcl" || err != nil || requested.Before(before) {
		t.Errorf("annotations after approve: %v (requestedAt: %v)", a, err)
	}
	// an older one by prefix
	r = flux(t, kc, "kcl", "approve", "production", "sha256:dddddddd", "-n", "apps")
	if a := annotations(t, c, "production"); r.code != 0 || a[kclv1.ApproveAnnotation] != digestD {
		t.Errorf("approve by prefix: exit %d, annotations %v", r.code, a)
	}
	if !strings.Contains(r.stdout, "  inputs:          replicas=5, web.tag=1.4.2\n") {
		t.Errorf("approve by prefix: stdout\n%s", r.stdout)
	}
}

// testApproveFallback asks as jane, allowed to read and patch KCLArtifacts: SelfSubjectReview
// names her; once the API server refuses SelfSubjectReview to every user, the kubeconfig's user
// (here --as) is recorded, and the plugin says so.
func testApproveFallback(t *testing.T, c client.Client, kc string) {
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "kcl-approver"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{kclv1.GroupVersion.Group}, Resources: []string{"kclartifacts"}, Verbs: []string{"get", "list", "patch"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "kcl-approver"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kcl-approver"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "jane"}}}
	for _, o := range []client.Object{role, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	r := flux(t, kc, "kcl", "approve", "production", "-n", "apps", "--as", "jane")
	if a := annotations(t, c, "production"); r.code != 0 || a[kclv1.ApprovedByAnnotation] != "jane" || strings.Contains(r.stderr, "⚠️") {
		t.Errorf("approve as jane: exit %d, stderr %q, annotations %v", r.code, r.stderr, a)
	}
	basic := &rbacv1.ClusterRoleBinding{}
	if err := c.Get(ctx, client.ObjectKey{Name: "system:basic-user"}, basic); err != nil {
		t.Fatal(err)
	}
	basic.Annotations[rbacv1.AutoUpdateAnnotationKey] = "false"
	basic.Subjects = nil
	if err := c.Update(ctx, basic); err != nil {
		t.Fatal(err)
	}
	if err := c.Patch(ctx, &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "production"}},
		client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"annotations":{"kcl.contrib.fluxcd.io/approved-by":null}}}`))); err != nil {
		t.Fatal(err)
	}
	r = flux(t, kc, "kcl", "approve", "production", "-n", "apps", "--as", "jane")
	if a := annotations(t, c, "production"); r.code != 0 || a[kclv1.ApprovedByAnnotation] != "jane" ||
		!strings.HasPrefix(r.stderr, "⚠️ the API server does not say who you are (SelfSubjectReview refused): recording the kubeconfig's user jane\n") {
		t.Errorf("approve as jane without SelfSubjectReview: exit %d, stderr %q, annotations %v", r.code, r.stderr, a)
	}
}

// cells splits a row of the plugin's tables, padding removed.
func cells(line string) []string {
	var out []string
	for _, c := range strings.Split(line, "\t") {
		out = append(out, strings.TrimRight(c, " "))
	}
	return out
}

// testLine stops and resumes the line of apps (the controller's part is in the envtests of
// internal/controller), and approves with an exemption.
func testLine(t *testing.T, c client.Client, kc string) {
	ctx := context.Background()
	nsAnnotations := func() map[string]string {
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: "apps"}, ns); err != nil {
			t.Fatal(err)
		}
		return ns.Annotations
	}
	if r := flux(t, kc, "kcl", "stop-line", "-n", "apps"); r.code != 1 || !strings.Contains(r.stderr, "--reason is required") {
		t.Errorf("stop-line without a reason: exit %d, stderr %s", r.code, r.stderr)
	}
	r := flux(t, kc, "kcl", "stop-line", "-n", "apps", "--reason", "incident 42")
	a := nsAnnotations()
	if r.code != 0 || a[kclv1.StopTheLineAnnotation] != "incident 42" || a[kclv1.StoppedByAnnotation] != "flux-kcl" {
		t.Errorf("stop-line: exit %d, stderr %s, annotations %v", r.code, r.stderr, a)
	}
	if _, err := time.Parse(time.RFC3339, a[kclv1.StoppedAtAnnotation]); err != nil {
		t.Errorf("stop-line: stopped-at %q: %v", a[kclv1.StoppedAtAnnotation], err)
	}
	if !strings.Contains(r.stderr, "the line of namespace apps is stopped") {
		t.Errorf("stop-line: stderr %s", r.stderr)
	}
	// -A needs the controller's Deployment, which this API server has not
	if r := flux(t, kc, "kcl", "stop-line", "-A", "--reason", "freeze"); r.code != 1 || !strings.Contains(r.stderr, "the line of every namespace is stopped on the controller's namespace") {
		t.Errorf("stop-line -A without a controller: exit %d, stderr %s", r.code, r.stderr)
	}

	r = flux(t, kc, "kcl", "approve", "production", digestE, "-n", "apps", "--exemption", "hotfix for incident 42")
	if a := annotations(t, c, "production"); r.code != 0 || a[kclv1.ExemptionAnnotation] != "hotfix for incident 42" || a[kclv1.ApproveAnnotation] != digestE {
		t.Errorf("approve --exemption: exit %d, stderr %s, annotations %v", r.code, r.stderr, a)
	}
	// a later approval without one withdraws the exemption
	r = flux(t, kc, "kcl", "approve", "production", digestD, "-n", "apps")
	if a := annotations(t, c, "production"); r.code != 0 || a[kclv1.ExemptionAnnotation] != "" {
		t.Errorf("approve after an exemption: exit %d, annotations %v", r.code, a)
	}

	r = flux(t, kc, "kcl", "resume-line", "-n", "apps")
	if a := nsAnnotations(); r.code != 0 || a[kclv1.StopTheLineAnnotation] != "" || a[kclv1.StoppedByAnnotation] != "" || a[kclv1.StoppedAtAnnotation] != "" {
		t.Errorf("resume-line: exit %d, stderr %s, annotations %v", r.code, r.stderr, a)
	}
}

// testReject rejects an artifact of production's history and one waiting, and lifts both.
func testReject(t *testing.T, c client.Client, kc string) {
	if r := flux(t, kc, "kcl", "reject", "production", digestC, "-n", "apps"); r.code != 1 || !strings.Contains(r.stderr, "--reason is required") {
		t.Errorf("reject without a reason: exit %d, stderr %s", r.code, r.stderr)
	}
	if r := flux(t, kc, "kcl", "reject", "production", digestA, "-n", "apps", "--reason", "x"); r.code != 1 ||
		!strings.Contains(r.stderr, "digest "+digestA+" is not an artifact of KCLArtifact production") {
		t.Errorf("reject of another's digest: exit %d, stderr %s", r.code, r.stderr)
	}
	r := flux(t, kc, "kcl", "reject", "production", digestC, "-n", "apps", "--reason", "checkout errors")
	a := annotations(t, c, "production")
	if r.code != 0 || a[kclv1.RejectAnnotation] != digestC || a[kclv1.RejectedByAnnotation] != "flux-kcl" || a[kclv1.RejectReasonAnnotation] != "checkout errors" {
		t.Errorf("reject: exit %d, stderr %s, annotations %v", r.code, r.stderr, a)
	}
	// a waiting one, by prefix
	r = flux(t, kc, "kcl", "reject", "production", "sha256:dddddddd", "-n", "apps", "--reason", "slow")
	if a := annotations(t, c, "production"); r.code != 0 || a[kclv1.RejectAnnotation] != digestC+","+digestD {
		t.Errorf("reject by prefix: exit %d, stderr %s, annotations %v", r.code, r.stderr, a)
	}
	r = flux(t, kc, "kcl", "unreject", "production", digestC, "-n", "apps")
	if a := annotations(t, c, "production"); r.code != 0 || a[kclv1.RejectAnnotation] != digestD {
		t.Errorf("unreject: exit %d, stderr %s, annotations %v", r.code, r.stderr, a)
	}
	if r := flux(t, kc, "kcl", "unreject", "production", digestC, "-n", "apps"); r.code != 1 || !strings.Contains(r.stderr, "is not rejected by KCLArtifact production") {
		t.Errorf("unreject of what is not rejected: exit %d, stderr %s", r.code, r.stderr)
	}
	r = flux(t, kc, "kcl", "unreject", "production", digestD, "-n", "apps")
	if a := annotations(t, c, "production"); r.code != 0 || a[kclv1.RejectAnnotation] != "" {
		t.Errorf("unreject the last: exit %d, stderr %s, annotations %v", r.code, r.stderr, a)
	}
}

// testVerified shows what spec.verify's checks said: get's Verified column and history's.
func testVerified(t *testing.T, c client.Client, kc string) {
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "checked"}}); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "checked"},
		Spec: kclv1.KCLArtifactSpec{SourceRef: kclv1.SourceReference{Kind: "GitRepository", Name: "web"}, Interval: metav1.Duration{Duration: time.Minute},
			Verify: &kclv1.Verify{Duration: metav1.Duration{Duration: 5 * time.Minute}, Checks: []kclv1.VerifyCheck{{Name: "error-rate",
				Prometheus: kclv1.PrometheusQuery{Address: "http://prometheus:9090", Query: "x"}, Condition: "value < 0.05"}}}}}
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	entry := func(d, result, verdict, value string) kclv1.ArtifactHistoryEntry {
		return kclv1.ArtifactHistoryEntry{Digest: d, Revision: "latest@" + d, SourceRevision: srcNew, URL: "http://x/" + d[7:15] + ".tar.gz",
			Objects: 2, LastPublished: now, Health: kclv1.HealthHealthy, HealthyAt: &now,
			Verification: &kclv1.Verification{Result: result, StartedAt: now, EndsAt: now, Checks: []kclv1.CheckStatus{
				{Name: "error-rate", Verdict: verdict, Value: value, LastRunAt: &now}}}}
	}
	obj.Status.History = []kclv1.ArtifactHistoryEntry{entry(digestA, kclv1.VerificationPassed, "Passed", "0.012"),
		entry(digestB, kclv1.VerificationFailed, "Failed", "0.5")}
	obj.Status.Artifact = &meta.Artifact{Path: "x", URL: obj.Status.History[0].URL, Revision: obj.Status.History[0].Revision,
		Digest: digestA, LastUpdateTime: now}
	obj.Status.Conditions = []metav1.Condition{{Type: kclv1.VerifiedCondition, Status: metav1.ConditionTrue, Reason: kclv1.VerificationPassedReason,
		Message: "passed", LastTransitionTime: now}}
	if err := c.Status().Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	r := flux(t, kc, "kcl", "get", "-n", "checked")
	if r.code != 0 || !strings.Contains(r.stdout, "VERIFIED") || !strings.Contains(r.stdout, "True: Verified error-rate=0.012") {
		t.Errorf("get with spec.verify: exit %d, stdout\n%s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	r = flux(t, kc, "kcl", "history", "web", "-n", "checked")
	if r.code != 0 || !strings.Contains(r.stdout, "VERIFIED") || !strings.Contains(r.stdout, "Failed error-rate=0.5 failed") {
		t.Errorf("history with verifications: exit %d, stdout\n%s\nstderr %s", r.code, r.stdout, r.stderr)
	}
}
