package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RejectAnnotation marks releases bad: a comma-separated list of digests of this KCLArtifact's
// artifacts (history or waiting). The inputs each one was rendered from (source revision and
// the values read from objects) are never promoted again by any stage of the pipeline (the
// stages this KCLArtifact follows and those that follow it, in its namespace, and its upstreams
// in others), a KCLArtifact of the pipeline that runs them rolls back where spec.remediation is
// set, and the same inputs are not published again: the mark holds across restarts, quarantine
// expiry and new renders until it is lifted (`flux kcl unreject`). Setting or changing it needs
// the verb approve, like an approval (config/admission).
const RejectAnnotation = "kcl.contrib.fluxcd.io/reject"

// RejectedByAnnotation names who last changed RejectAnnotation; the admission policy requires it
// to be that user.
const RejectedByAnnotation = "kcl.contrib.fluxcd.io/rejected-by"

// RejectReasonAnnotation is why, as the last rejection said.
const RejectReasonAnnotation = "kcl.contrib.fluxcd.io/reject-reason"

// ReleaseRejectedReason: the inputs were rejected (RejectAnnotation somewhere in the pipeline):
// they are not published, and an artifact of them is rolled back.
const ReleaseRejectedReason = "ReleaseRejected"

// GateRejected is listed first for a waiting artifact whose inputs were rejected: it never opens.
const GateRejected = "rejected"

// RejectedRelease is a release this KCLArtifact's RejectAnnotation marked bad, as the controller
// resolved it from the artifact it names: the inputs that are never promoted again.
type RejectedRelease struct {
	// Digest of the rejected artifact of this KCLArtifact.
	Digest string `json:"digest"`
	// SourceRevision it was rendered from; empty when the digest names no artifact of this
	// KCLArtifact (then nothing is rejected, and Message says so).
	// +optional
	SourceRevision string `json:"sourceRevision,omitempty"`
	// Inputs it was rendered with (Secret values masked).
	// +optional
	Inputs []InputValue `json:"inputs,omitempty"`
	// RejectedBy is who rejected it (RejectedByAnnotation when it was first seen).
	// +optional
	RejectedBy string `json:"rejectedBy,omitempty"`
	// Reason is why (RejectReasonAnnotation when it was first seen).
	// +optional
	Reason string `json:"reason,omitempty"`
	// RejectedAt is when the controller first saw the rejection.
	RejectedAt metav1.Time `json:"rejectedAt"`
	// Message says what could not be resolved, when SourceRevision is empty.
	// +optional
	Message string `json:"message,omitempty"`
}
