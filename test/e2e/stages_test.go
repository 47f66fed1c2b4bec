package e2e

import (
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/acl"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// badStageProgram is stageProgram with a Deployment that never becomes ready (there is no
// kubelet here): kustomize-controller's health check fails it.
var badStageProgram = strings.Replace(stageProgram, "items = [_nsObj, _cm] if _own else [_cm]", `_never = {
    apiVersion = "apps/v1"
    kind = "Deployment"
    metadata = {name = "never-ready", namespace = _ns}
    spec = {
        selector.matchLabels = {app = "never-ready"}
        template = {
            metadata.labels = {app = "never-ready"}
            spec.containers = [{name = "app", image = "registry.invalid/never:1"}]
        }
    }
}
items = [_cm, _never]`, 1)

// TestStagesAcrossNamespaces: the layout docs/promotion.md recommends when approvals must be a
// boundary. dev and staging live in one namespace, production in its own, following staging
// across namespaces with staging's consent (kcl.contrib.fluxcd.io/followers). Without the consent
// production says AccessDenied with what to add; with it a good commit flows to production after
// an approval, with the real kustomize-controller applying each stage; a commit dev saw fail never
// reaches staging, and never production, approved or not.
func TestStagesAcrossNamespaces(t *testing.T) {
	t.Parallel()
	devNs := newNamespace(t, "stages-dev")
	prodNs := newNamespace(t, "stages-prod")
	stagingTarget := newNamespace(t, "stages-staging")

	rev1 := gitRevision(createRepo(t, devNs, stageFiles("1")))
	createGitRepository(t, devNs, "app", devNs)
	createGitRepository(t, prodNs, "app", devNs)
	create(t, newStage(devNs, "dev", "dev", nil))
	staging := newStage(devNs, "staging", "staging", map[string]string{"namespace": stagingTarget})
	staging.Spec.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "dev"}}
	create(t, staging)
	prod := newStage(prodNs, "production", "production", nil)
	prod.Spec.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "staging", Namespace: devNs},
		Approval: kclv1.ApprovalRequired}
	create(t, prod)

	// no consent: production renders nothing it could publish, and says what to add
	want := "KCLArtifact " + devNs + "/staging does not exist or does not allow stages of namespace " + prodNs +
		" to follow it: its owner adds the annotation " + kclv1.FollowersAnnotation + ": " + prodNs
	waitStage(t, prodNs, "production", "AccessDenied naming the annotation", func(o *kclv1.KCLArtifact) bool {
		c := apimeta.FindStatusCondition(o.Status.Conditions, "Ready")
		return c != nil && c.Reason == acl.AccessDeniedReason && strings.Contains(c.Message, want)
	})
	st := waitStageHealthy(t, devNs, "staging", rev1)
	expectNotInCluster(t, suite.env.Client, "production's namespace", prodNs, "web-config")

	// consent: production waits for its approval, then runs what staging ran
	patchKCLArtifact(t, devNs, "staging", `{"metadata":{"annotations":{"`+kclv1.FollowersAnnotation+`":"`+prodNs+`"}}}`)
	p := waitStage(t, prodNs, "production", "waiting for approval", func(o *kclv1.KCLArtifact) bool {
		return o.Status.Promotion != nil && len(o.Status.Promotion.Waiting) == 1 &&
			apimeta.FindStatusCondition(o.Status.Conditions, kclv1.PromotedCondition) != nil &&
			apimeta.FindStatusCondition(o.Status.Conditions, kclv1.PromotedCondition).Reason == kclv1.WaitingForApprovalReason
	})
	expectNotInCluster(t, suite.env.Client, "production's namespace", prodNs, "web-config")
	approve(t, prodNs, "production", p.Status.Promotion.Waiting[0].Digest, "alice")
	waitStageApplied(t, prodNs, "production", rev1)
	p = waitStageHealthy(t, prodNs, "production", rev1)
	waitConfigMap(t, prodNs, "web-config", map[string]string{"message": "production", "version": "1"})
	if rec := p.Status.History[0].Promotion; rec == nil || rec.Upstream != devNs+"/staging" ||
		rec.UpstreamRevision != st.Status.History[0].Revision || rec.ApprovedBy != "alice" {
		t.Errorf("production: history[0].promotion %+v, want staging %s of %s approved by alice", rec, devNs, st.Status.History[0].Revision)
	}

	// a commit dev fails: staging never publishes it, production never, even approved
	rev2 := commit(t, devNs, "never ready", map[string]string{"main.k": strings.Replace(badStageProgram, "%s", "2", 1)})
	waitStage(t, devNs, "dev", "its artifact of "+rev2+" Failed", func(o *kclv1.KCLArtifact) bool {
		return len(o.Status.History) > 0 && o.Status.History[0].SourceRevision == rev2 && o.Status.History[0].Health == kclv1.HealthFailed
	})
	waitStage(t, devNs, "staging", rev2+" never promoted", func(o *kclv1.KCLArtifact) bool {
		return o.Status.Promotion != nil && len(o.Status.Promotion.Waiting) > 0 &&
			o.Status.Promotion.Waiting[0].SourceRevision == rev2 &&
			strings.Contains(gateMessage(o.Status.Promotion.Waiting[0], kclv1.GateUpstream), "saw these inputs fail")
	})
	p = waitStage(t, prodNs, "production", rev2+" waiting, upstream closed", func(o *kclv1.KCLArtifact) bool {
		return o.Status.Promotion != nil && len(o.Status.Promotion.Waiting) > 0 && o.Status.Promotion.Waiting[0].SourceRevision == rev2 &&
			len(o.Status.Promotion.Waiting[0].Gates) > 0
	})
	approve(t, prodNs, "production", p.Status.Promotion.Waiting[0].Digest, "alice")
	p = waitStage(t, prodNs, "production", "the approval of "+rev2+" seen, its upstream gate closed", func(o *kclv1.KCLArtifact) bool {
		w := o.Status.Promotion.Waiting
		return len(w) > 0 && w[0].SourceRevision == rev2 && gate(w[0], kclv1.GateApproval) != nil && gate(w[0], kclv1.GateApproval).Open &&
			gate(w[0], kclv1.GateUpstream) != nil && !gate(w[0], kclv1.GateUpstream).Open
	})
	if p.Status.Artifact == nil || p.Status.Artifact.Metadata[originRevisionKey] != rev1 {
		t.Errorf("production serves %s, want its artifact of %s", artifactString(p.Status.Artifact), rev1)
	}
	expectConfigMap(t, prodNs, "web-config", map[string]string{"message": "production", "version": "1"})
}

func gateMessage(w kclv1.WaitingArtifact, name string) string {
	if g := gate(w, name); g != nil {
		return g.Message
	}
	return ""
}

// approve approves digest on the stage as `flux kcl approve` does.
func approve(t *testing.T, ns, name, digest, by string) {
	t.Helper()
	patchKCLArtifact(t, ns, name, `{"metadata":{"annotations":{"`+kclv1.ApproveAnnotation+`":"`+digest+`","`+kclv1.ApprovedByAnnotation+`":"`+by+`"}}}`)
}
