package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// TestRejectedReleaseAcrossARestart: dev runs release 2 and staging has it waiting for an
// approval; release 2 is rejected in dev. Dev rolls back at once and the real kustomize-controller
// applies release 1 again; staging holds release 2 behind the gate rejected. The controller is
// then restarted: the mark survives it. An approval of release 2 in staging, a reconcile request
// in dev (which renders its source, still at release 2) publish nothing; the rejection lifted,
// dev runs release 2 again.
//
// Not parallel: it restarts the controller every test uses.
func TestRejectedReleaseAcrossARestart(t *testing.T) {
	ns := newNamespace(t, "reject")
	rev1 := gitRevision(createRepo(t, ns, stageFiles("1")))
	createGitRepository(t, ns, "app", ns)
	dev := newStage(ns, "dev", "dev", map[string]string{"namespace": ns})
	dev.Spec.Remediation = &kclv1.Remediation{}
	create(t, dev)
	staging := newStage(ns, "staging", "staging", map[string]string{"namespace": newNamespace(t, "reject-staging")})
	staging.Spec.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "dev"}, Approval: kclv1.ApprovalRequired}
	create(t, staging)
	d := waitStageHealthy(t, ns, "dev", rev1)
	devV1 := d.Status.Artifact.Digest

	rev2 := commit(t, ns, "release 2", stageFiles("2"))
	d = waitStageHealthy(t, ns, "dev", rev2)
	waitConfigMap(t, ns, "web-config", map[string]string{"message": "dev", "version": "2"})
	s := waitStage(t, ns, "staging", rev2+" waiting for approval", func(o *kclv1.KCLArtifact) bool {
		return o.Status.Promotion != nil && len(o.Status.Promotion.Waiting) > 0 && o.Status.Promotion.Waiting[0].SourceRevision == rev2
	})
	waiting := s.Status.Promotion.Waiting[0].Digest

	patchKCLArtifact(t, ns, "dev", `{"metadata":{"annotations":{"`+kclv1.RejectAnnotation+`":"`+d.Status.Artifact.Digest+
		`","`+kclv1.RejectedByAnnotation+`":"alice","`+kclv1.RejectReasonAnnotation+`":"checkout errors"}}}`)
	waitStage(t, ns, "dev", "rolled back to release 1", func(o *kclv1.KCLArtifact) bool {
		q := o.Status.Remediation
		return o.Status.Artifact != nil && o.Status.Artifact.Digest == devV1 && q != nil && q.Quarantined != nil &&
			q.Quarantined.Failure.Reason == kclv1.ReleaseRejectedReason
	})
	waitConfigMap(t, ns, "web-config", map[string]string{"message": "dev", "version": "1"})
	rejectedGate := func(o *kclv1.KCLArtifact) bool {
		w := o.Status.Promotion.Waiting
		return len(w) > 0 && w[0].Digest == waiting && len(w[0].Gates) > 0 && w[0].Gates[0].Name == kclv1.GateRejected &&
			strings.Contains(w[0].Gates[0].Message, "rejected by alice in dev")
	}
	waitStage(t, ns, "staging", rev2+" behind the gate rejected", rejectedGate)

	restartController(t, "", nil)
	approve(t, ns, "staging", waiting, "bob")
	requested := time.Now().Format(time.RFC3339Nano)
	patchKCLArtifact(t, ns, "dev", `{"metadata":{"annotations":{"`+meta.ReconcileRequestAnnotation+`":"`+requested+`"}}}`)
	waitStage(t, ns, "staging", "the approval of "+rev2+" seen after the restart, still rejected", func(o *kclv1.KCLArtifact) bool {
		w := o.Status.Promotion.Waiting
		return rejectedGate(o) && gate(w[0], kclv1.GateApproval) != nil && gate(w[0], kclv1.GateApproval).Open
	})
	d = waitStage(t, ns, "dev", "its source's release 2 refused after the restart", func(o *kclv1.KCLArtifact) bool {
		c := apimeta.FindStatusCondition(o.Status.Conditions, meta.ReadyCondition)
		return c != nil && c.Reason == kclv1.ReleaseRejectedReason && o.Status.LastHandledReconcileAt == requested
	})
	t.Logf("dev after the restart: Ready=False %s: %s", kclv1.ReleaseRejectedReason, apimeta.FindStatusCondition(d.Status.Conditions, meta.ReadyCondition).Message)
	if d.Status.Artifact.Digest != devV1 {
		t.Errorf("dev serves %s after the restart, want release 1's %s", d.Status.Artifact.Digest, devV1)
	}
	// staging has published nothing: its release 1 was never approved, its release 2 is rejected
	if got := getStage(t, ns, "staging"); got.Status.Artifact != nil {
		t.Errorf("staging serves %s after the restart, want nothing", artifactString(got.Status.Artifact))
	}
	expectConfigMap(t, ns, "web-config", map[string]string{"message": "dev", "version": "1"})

	began := time.Now()
	patchKCLArtifact(t, ns, "dev", `{"metadata":{"annotations":{"`+kclv1.RejectAnnotation+`":null}}}`)
	waitStageHealthy(t, ns, "dev", rev2)
	waitConfigMap(t, ns, "web-config", map[string]string{"message": "dev", "version": "2"})
	waitStageApplied(t, ns, "staging", rev2)
	t.Logf("rejection lifted to release 2 applied again in dev and published in staging: %s", time.Since(began).Round(100*time.Millisecond))
}
