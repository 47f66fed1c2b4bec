package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Remediation is what is done when the published artifact fails.
type Remediation struct {
	// Retries is how many times the failed phase's Kustomization is reconciled again before the
	// strategy applies; 0, the default, applies it at the first failure.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	// +optional
	Retries int `json:"retries,omitempty"`

	// Strategy once the retries are spent: rollback publishes again the newest history entry
	// that was applied and healthy, and does not publish the failed artifact again while the
	// inputs render it with the same Kustomization template.
	// +kubebuilder:validation:Enum=rollback
	// +kubebuilder:default=rollback
	// +optional
	Strategy string `json:"strategy,omitempty"`
}

// RollbackStrategy is the only remediation strategy.
const RollbackStrategy = "rollback"

// RemediationStatus counts the failures of the published artifact and holds the quarantine.
type RemediationStatus struct {
	// Digest of the artifact whose failures are counted.
	// +optional
	Digest string `json:"digest,omitempty"`
	// Failures of that artifact, one per failed attempt of kustomize-controller.
	// +optional
	Failures int `json:"failures,omitempty"`
	// RetryRequestedAt is the reconcile.fluxcd.io/requestedAt value of the retry asked of the
	// failed phase's Kustomization, until that Kustomization has handled it.
	// +optional
	RetryRequestedAt string `json:"retryRequestedAt,omitempty"`
	// Quarantined is the failed artifact rolled back from.
	// +optional
	Quarantined *QuarantinedArtifact `json:"quarantined,omitempty"`
}

// QuarantinedArtifact is a failed artifact that is not published again while the inputs render
// it with the same Kustomization template.
type QuarantinedArtifact struct {
	// Digest of the failed artifact.
	Digest string `json:"digest"`
	// Revision of the failed artifact.
	Revision string `json:"revision"`
	// SourceRevision it was rendered from.
	// +optional
	SourceRevision string `json:"sourceRevision,omitempty"`
	// TemplateDigest identifies spec.kustomization as it was when the artifact failed: another
	// template (a longer timeout, a patch) tries it again.
	TemplateDigest string `json:"templateDigest"`
	// Failure is why it failed.
	Failure ArtifactFailure `json:"failure"`
	// RolledBackTo is the digest of the artifact published instead.
	RolledBackTo string `json:"rolledBackTo"`
	// RolledBackAt is when it was published instead.
	RolledBackAt metav1.Time `json:"rolledBackAt"`
	// RollbackPhasesApart tells that the artifact rolled back to holds the phases of a rollback
	// apart (rollback/pre, rollback/post: Helm rollback hooks), which its phases apply.
	// +optional
	RollbackPhasesApart bool `json:"rollbackPhasesApart,omitempty"`
}
