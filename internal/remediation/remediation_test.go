package remediation

import (
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	"k8s.io/utils/ptr"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

func published(digest string, retries int) *kclv1.KCLArtifact {
	obj := &kclv1.KCLArtifact{}
	obj.Spec.Remediation = &kclv1.Remediation{Retries: retries}
	obj.Status.Artifact = &meta.Artifact{Digest: digest, Revision: "latest@" + digest}
	return obj
}

// A failed artifact is retried as often as spec.remediation.retries says, each retry counted when
// the failed phase answered it, then rolled back.
func TestFailuresAreRetriedThenRolledBack(t *testing.T) {
	obj := published("sha256:b", 1)
	failed := Verdict{Health: kclv1.HealthFailed}
	act, st := Decide(obj, failed)
	if act != Retry || st.Failures != 1 || st.Digest != "sha256:b" {
		t.Fatalf("first failure: %v %+v", act, st)
	}
	st.RetryRequestedAt = "t1"
	obj.Status.Remediation = st
	if act, _ := Decide(obj, Verdict{Health: kclv1.HealthFailed, HandledAt: "t0"}); act != Wait {
		t.Errorf("a verdict from before the retry was counted: %v", act)
	}
	act, st = Decide(obj, Verdict{Health: kclv1.HealthFailed, HandledAt: "t1"})
	if act != RollBack || st.Failures != 2 || st.RetryRequestedAt != "" {
		t.Errorf("the retry failed too: %v %+v", act, st)
	}
	if obj.Status.Remediation.Failures != 1 {
		t.Error("Decide changed the status it was given")
	}
}

// A new artifact starts counting again; health ends what was said of a failure.
func TestANewArtifactStartsAgain(t *testing.T) {
	obj := published("sha256:c", 0)
	obj.Status.Remediation = &kclv1.RemediationStatus{Digest: "sha256:b", Failures: 3, RetryRequestedAt: "t1"}
	act, st := Decide(obj, Verdict{Health: kclv1.HealthProgressing})
	if act != Wait || st.Digest != "sha256:c" || st.Failures != 0 || st.RetryRequestedAt != "" {
		t.Errorf("progressing: %v %+v", act, st)
	}
	if act, _ := Decide(obj, Verdict{Health: kclv1.HealthHealthy}); act != Forget {
		t.Errorf("healthy: %v", act)
	}
}

// Rolled back, the artifact served is judged as the rollback's: healthy is reported, a failure
// is not rolled back again.
func TestARollbackIsNotRolledBackAgain(t *testing.T) {
	obj := published("sha256:a", 0)
	q := &kclv1.QuarantinedArtifact{Digest: "sha256:b", RolledBackTo: "sha256:a", TemplateDigest: TemplateDigest(obj)}
	obj.Status.Remediation = &kclv1.RemediationStatus{Digest: "sha256:a", Quarantined: q}
	if act, _ := Decide(obj, Verdict{Health: kclv1.HealthFailed}); act != RollbackFailed {
		t.Errorf("failed after a rollback: %v", act)
	}
	if act, _ := Decide(obj, Verdict{Health: kclv1.HealthHealthy}); act != HealthyAfterRollback {
		t.Errorf("healthy after a rollback: %v", act)
	}
	if QuarantinedAs(obj, "sha256:b") != q || QuarantinedAs(obj, "sha256:c") != nil {
		t.Error("the quarantine holds the failed digest back, and only it")
	}
	obj.Spec.Kustomization = &kclv1.KustomizationTemplate{Timeout: nil, Prune: ptr.To(false)}
	if QuarantinedAs(obj, "sha256:b") != nil {
		t.Error("another template tries the failed artifact again")
	}
	if reset, again := Reset(obj, false); !reset || !again {
		t.Errorf("a new template ends the quarantine and renders again: %v %v", reset, again)
	}
	obj.Spec.PinnedDigest = "sha256:a"
	if RolledBack(obj) != nil {
		t.Error("a pin is not a rollback")
	}
}

func TestTargetIsTheNewestHealthyEntryStillStored(t *testing.T) {
	obj := published("sha256:c", 0)
	obj.Status.History = []kclv1.ArtifactHistoryEntry{
		{Digest: "sha256:c", Health: kclv1.HealthFailed},
		{Digest: "sha256:b", Health: kclv1.HealthHealthy},
		{Digest: "sha256:a", Health: kclv1.HealthHealthy},
	}
	gone := func(e kclv1.ArtifactHistoryEntry) bool { return e.Digest != "sha256:b" }
	if e, ok := Target(obj, gone); !ok || e.Digest != "sha256:a" {
		t.Errorf("target %+v %v", e, ok)
	}
	if _, ok := Target(obj, func(kclv1.ArtifactHistoryEntry) bool { return false }); ok {
		t.Error("nothing stored, nothing to roll back to")
	}
}
