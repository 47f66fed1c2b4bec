package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ArtifactHistoryEntry is an artifact kept in storage.
type ArtifactHistoryEntry struct {
	// Digest of the artifact.
	Digest string `json:"digest"`
	// Revision of the artifact, `<ref>@<digest>`. Stored only when it is not the one the digest
	// and sourceRevision give (`<ref of sourceRevision>@<digest>`, `latest@<digest>` for a
	// source revision without a ref): a client of this module reads it whole either way.
	// +optional
	Revision string `json:"revision,omitempty"`
	// SourceRevision is the source revision it was rendered from.
	// +optional
	SourceRevision string `json:"sourceRevision,omitempty"`
	// URL where the artifact is served. Stored as its file name, a reference relative to
	// status.artifact.url whose query (the token) it shares, when it is served beside the
	// current artifact: a client of this module reads it whole either way.
	URL string `json:"url"`
	// Size of the artifact in bytes.
	// +optional
	Size *int64 `json:"size,omitempty"`
	// Objects is the number of objects it holds.
	Objects int `json:"objects"`
	// LastPublished is when it was last published as the current artifact.
	LastPublished metav1.Time `json:"lastPublished"`
	// Health is what became of it once published: Progressing, Healthy, Failed or NotApplied;
	// empty when no Kustomization is generated.
	// +optional
	Health string `json:"health,omitempty"`
	// HealthyAt is when it was first seen applied and healthy in every phase.
	// +optional
	HealthyAt *metav1.Time `json:"healthyAt,omitempty"`
	// Failure says where and why it failed.
	// +optional
	Failure *ArtifactFailure `json:"failure,omitempty"`
	// Inputs are the arguments it was rendered with (Secret values masked), at most 32, those
	// read from objects first; empty for an artifact rendered before inputs were recorded.
	// +optional
	Inputs []InputValue `json:"inputs,omitempty"`
	// Missing is true when its file is no longer in storage, or no longer has its digest (an
	// emptyDir storage lost in a restart): it cannot be pinned or rolled back to.
	// +optional
	Missing bool `json:"missing,omitempty"`

	// Promotion, for a stage, is the upstream artifact that proved its inputs and the approval.
	// +optional
	Promotion *PromotionRecord `json:"promotion,omitempty"`

	// OCI is where spec.publish.oci pushed it.
	// +optional
	OCI *OCIRecord `json:"oci,omitempty"`

	// Verification is what the checks of spec.verify said of it once it was healthy.
	// +optional
	Verification *Verification `json:"verification,omitempty"`
}

// InputValue is one argument that produced an artifact, for the history.
type InputValue struct {
	// Name of the argument.
	Name string `json:"name"`
	// Value, `***` for a value read from a Secret, cut at 256 bytes.
	Value string `json:"value"`
	// From is the object it was read from, `<Kind>/<name>`; empty for spec.arguments.
	// +optional
	From string `json:"from,omitempty"`
}

// ArtifactFailure says where and why an artifact failed once published.
type ArtifactFailure struct {
	// Phase that failed: pre, main or post.
	// +optional
	Phase string `json:"phase,omitempty"`
	// Reason of the Kustomization's Ready condition.
	Reason string `json:"reason"`
	// Message of the Kustomization's Ready condition (for a failed Job, which Job and why).
	Message string `json:"message"`
	// At is when the failure was seen.
	At metav1.Time `json:"at"`
}

// Health of a published artifact (status.history[].health).
const (
	// HealthProgressing: published, kustomize-controller has not applied it in every phase yet.
	HealthProgressing = "Progressing"
	// HealthHealthy: every phase applied it and passed its health checks.
	HealthHealthy = "Healthy"
	// HealthFailed: a phase failed to apply it or its health checks.
	HealthFailed = "Failed"
	// HealthNotApplied: replaced by another artifact before any phase had a verdict on it.
	HealthNotApplied = "NotApplied"
)
