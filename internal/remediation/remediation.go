// Package remediation decides what spec.remediation does about the published artifact: a failed
// one is retried, then the newest healthy history entry is published again and the failed
// artifact quarantined, so that the inputs that render it do not publish it again (the rollback
// holds where an automatic rollback of Git's desired state would be undone by the next apply).
// Inputs that render another artifact are tried (roll forward). The decisions are pure
// functions of the KCLArtifact and the verdict of its Kustomizations, as internal/promotion holds
// the gates' decisions; the controller acts on them.
package remediation

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/fluxcd/pkg/runtime/conditions"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// RolledBack is the quarantine while the artifact rolled back to is the one published.
func RolledBack(obj *kclv1.KCLArtifact) *kclv1.QuarantinedArtifact {
	rem, a := obj.Status.Remediation, obj.Status.Artifact
	if rem == nil || rem.Quarantined == nil || a == nil || obj.Spec.PinnedDigest != "" || a.Digest != rem.Quarantined.RolledBackTo {
		return nil
	}
	return rem.Quarantined
}

// QuarantinedAs is the quarantine that holds a rendered artifact of this digest back: the failed
// one, deployed with the same Kustomization template.
func QuarantinedAs(obj *kclv1.KCLArtifact, digest string) *kclv1.QuarantinedArtifact {
	q := RolledBack(obj)
	if q == nil || q.Digest != digest || q.TemplateDigest != TemplateDigest(obj) {
		return nil
	}
	return q
}

// TemplateDigest identifies spec.kustomization: a failed artifact is tried again under another
// template (a longer timeout, other health checks, a patch).
func TemplateDigest(obj *kclv1.KCLArtifact) string {
	b, _ := json.Marshal(obj.Spec.Kustomization)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Reset tells, before the inputs are rendered, whether remediation ends: when asked to
// (requested: a new reconcile.fluxcd.io/resetAt), when it was turned off,
// or when the template changed under a quarantine. A rolled-back KCLArtifact then renders its
// inputs again (renderAgain), so that their artifact is published and tried.
func Reset(obj *kclv1.KCLArtifact, requested bool) (reset, renderAgain bool) {
	q := RolledBack(obj)
	if !requested && obj.Spec.Remediation != nil && (q == nil || q.TemplateDigest == TemplateDigest(obj)) {
		return false, false
	}
	return true, q != nil
}

// Lift ends remediation's hold once the inputs render another artifact than the one its
// failures were counted for: the failure count starts again, and the quarantine is over.
func Lift(obj *kclv1.KCLArtifact) {
	rem := obj.Status.Remediation
	if rem == nil || (rem.Quarantined == nil && rem.Digest == obj.Status.Artifact.Digest) {
		return
	}
	Clear(obj)
}

// Clear forgets the failures counted, the quarantine and what the Remediated condition said.
func Clear(obj *kclv1.KCLArtifact) {
	obj.Status.Remediation = nil
	conditions.Delete(obj, kclv1.RemediatedCondition)
}

// Action is what remediation does about the published artifact's verdict.
type Action int

const (
	// Wait: nothing to do yet (progressing, or the verdict a retry asked for is not in).
	Wait Action = iota
	// Forget: healthy with nothing held; what was said of an earlier failure is over.
	Forget
	// HealthyAfterRollback: the artifact rolled back to is healthy.
	HealthyAfterRollback
	// RollbackFailed: the artifact rolled back to failed too; nothing more is done until the
	// inputs render another artifact or a reset is asked for.
	RollbackFailed
	// Retry: ask the failed phase's Kustomization to try again.
	Retry
	// RollBack: publish the newest healthy history entry again and quarantine the failed one.
	RollBack
)

// Verdict is what the Kustomizations say of the published artifact, for Decide.
type Verdict struct {
	// Health is Healthy, Failed or Progressing ("" when no Kustomization is generated).
	Health string
	// HandledAt is the failed phase's Kustomization's lastHandledReconcileAt: whether it
	// answered the retry asked for.
	HandledAt string
}

// Decide is what remediation does about the published artifact's verdict, and the status it
// records: the failures counted for that artifact (a new artifact starts again from none) and
// the retry asked for. st is status.remediation as it stands (nil: nothing counted); it is not
// changed.
func Decide(obj *kclv1.KCLArtifact, v Verdict) (Action, *kclv1.RemediationStatus) {
	digest := obj.Status.Artifact.Digest
	st := obj.Status.Remediation.DeepCopy()
	if st != nil && st.Digest != digest {
		st.Digest, st.Failures, st.RetryRequestedAt = digest, 0, ""
	}
	rolledBack := RolledBack(obj) != nil
	switch {
	case v.Health == kclv1.HealthHealthy && rolledBack:
		return HealthyAfterRollback, st
	case v.Health == kclv1.HealthHealthy:
		return Forget, st
	case v.Health != kclv1.HealthFailed:
		return Wait, st
	case rolledBack:
		return RollbackFailed, st
	}
	if st == nil {
		st = &kclv1.RemediationStatus{Digest: digest}
	}
	switch {
	case st.RetryRequestedAt != "" && v.HandledAt == st.RetryRequestedAt:
		st.Failures++
		st.RetryRequestedAt = ""
	case st.RetryRequestedAt != "":
		return Wait, st // the verdict asked for is not in yet
	case st.Failures == 0:
		st.Failures = 1
	}
	if st.Failures <= obj.Spec.Remediation.Retries {
		return Retry, st
	}
	return RollBack, st
}

// Target is the newest history entry, other than the published one, that was applied and healthy
// and is still in storage (present).
func Target(obj *kclv1.KCLArtifact, present func(kclv1.ArtifactHistoryEntry) bool) (kclv1.ArtifactHistoryEntry, bool) {
	for _, e := range obj.Status.History {
		if e.Digest != obj.Status.Artifact.Digest && e.Health == kclv1.HealthHealthy && present(e) {
			return e, true
		}
	}
	return kclv1.ArtifactHistoryEntry{}, false
}

// RolledBackMessage says which artifact failed, why, and which one serves instead.
func RolledBackMessage(obj *kclv1.KCLArtifact, q *kclv1.QuarantinedArtifact) string {
	return fmt.Sprintf("artifact %s rendered from %s failed (%s); rolled back to %s rendered from %s",
		q.Revision, q.SourceRevision, FailureText(&q.Failure), obj.Status.Artifact.Revision, obj.Status.SourceRevision)
}

// FailureText says where and why an artifact failed.
func FailureText(f *kclv1.ArtifactFailure) string {
	if f == nil {
		return "unknown failure"
	}
	s := f.Reason + ": " + f.Message
	if f.Phase != "" {
		s = "phase " + f.Phase + ": " + s
	}
	return s
}
