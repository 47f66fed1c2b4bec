package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Promotion is where a stage's inputs come from and the gates they pass.
type Promotion struct {
	// From is the upstream stage.
	// +required
	From UpstreamReference `json:"from"`

	// Soak is how long the upstream must have run the inputs healthy (status.history's
	// healthyAt), still its current artifact or replaced only by newer healthy ones.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	Soak *metav1.Duration `json:"soak,omitempty"`

	// Windows, when set, are the only times a new artifact is published; what is published stays.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Windows []PromotionWindow `json:"windows,omitempty"`

	// Approval, when Required, publishes an artifact only once a person approved its digest
	// (`flux kcl approve`, or the kcl.contrib.fluxcd.io/approve annotation).
	// +kubebuilder:validation:Enum=Required
	// +optional
	Approval string `json:"approval,omitempty"`
}

// ApprovalRequired is spec.promotion.approval's only value.
const ApprovalRequired = "Required"

// UpstreamReference names the upstream KCLArtifact.
type UpstreamReference struct {
	// Name of the upstream KCLArtifact.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
	// +required
	Name string `json:"name"`
	// Namespace of the upstream, the stage's own when empty. An upstream of another namespace is
	// followed only when it consents: its annotation kcl.contrib.fluxcd.io/followers lists the
	// stage's namespace (or `*`); otherwise the stage is AccessDenied.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// PromotionWindow is a time window opened by a cron schedule.
type PromotionWindow struct {
	// Schedule opens the window, in cron's five fields (minute hour day-of-month month
	// day-of-week) or a descriptor such as @daily.
	// +required
	Schedule string `json:"schedule"`
	// Duration the window stays open: more than 0, at most 7 days.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +required
	Duration metav1.Duration `json:"duration"`
	// TimeZone of the schedule, an IANA name; defaults to UTC.
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// PromotionStatus lists what a stage rendered and has not published yet.
type PromotionStatus struct {
	// Upstream is the upstream KCLArtifact followed.
	// +optional
	Upstream string `json:"upstream,omitempty"`
	// Waiting are the artifacts rendered ahead and not published, newest first, with their gates.
	// +optional
	Waiting []WaitingArtifact `json:"waiting,omitempty"`
	// RejectedApproval is an approval annotation naming no waiting artifact.
	// +optional
	RejectedApproval string `json:"rejectedApproval,omitempty"`
}

// WaitingArtifact is an artifact rendered ahead, stored, and waiting for its gates.
type WaitingArtifact struct {
	// Digest of the artifact.
	Digest string `json:"digest"`
	// Revision of the artifact, `<ref>@<digest>`.
	Revision string `json:"revision"`
	// SourceRevision it was rendered from.
	// +optional
	SourceRevision string `json:"sourceRevision,omitempty"`
	// URL where it can be read before it is published.
	URL string `json:"url"`
	// Size of the artifact in bytes.
	// +optional
	Size *int64 `json:"size,omitempty"`
	// Objects it holds.
	Objects int `json:"objects"`
	// InputDigest identifies its inputs: the same inputs are not rendered again.
	InputDigest string `json:"inputDigest"`
	// RenderedAt is when it was rendered.
	RenderedAt metav1.Time `json:"renderedAt"`
	// Inputs it was rendered with (Secret values masked).
	// +optional
	Inputs []InputValue `json:"inputs,omitempty"`
	// Gates are the state of each gate for it, in order: line (while the line is stopped),
	// upstream, soak, window, approval.
	// +optional
	Gates []GateStatus `json:"gates,omitempty"`
	// ApprovedBy is who approved it, when approval is required and given.
	// +optional
	ApprovedBy string `json:"approvedBy,omitempty"`
	// ApprovedAt is when the approval was seen.
	// +optional
	ApprovedAt *metav1.Time `json:"approvedAt,omitempty"`
}

// Gates of a promotion (status.promotion.waiting[].gates[].name).
const (
	GateUpstream = "upstream"
	GateSoak     = "soak"
	GateWindow   = "window"
	GateApproval = "approval"
	// GateLine is listed first while the line is stopped (StopTheLineAnnotation).
	GateLine = "line"
)

// GateStatus is one gate's state for a waiting artifact.
type GateStatus struct {
	// Name of the gate: line, upstream, soak, window or approval.
	Name string `json:"name"`
	// Open tells whether the gate lets the artifact through.
	Open bool `json:"open"`
	// Since is when it started waiting on this gate, or when the gate opened.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// OpensAt is when the gate opens, when that is known (the end of the soak, the next window).
	// +optional
	OpensAt *metav1.Time `json:"opensAt,omitempty"`
	// Message says what the gate waits for, e.g. `soak 7m/10m of staging's sha256:…`.
	// +optional
	Message string `json:"message,omitempty"`
}

// PromotionRecord is how a stage came to publish an artifact.
type PromotionRecord struct {
	// Upstream is the upstream KCLArtifact.
	Upstream string `json:"upstream"`
	// UpstreamRevision is the upstream's artifact that ran the same inputs healthy.
	UpstreamRevision string `json:"upstreamRevision"`
	// HealthySince is when that artifact became healthy upstream.
	// +optional
	HealthySince *metav1.Time `json:"healthySince,omitempty"`
	// RenderedAt is when this stage rendered it ahead.
	// +optional
	RenderedAt *metav1.Time `json:"renderedAt,omitempty"`
	// ApprovedBy is who approved it, when approval was required.
	// +optional
	ApprovedBy string `json:"approvedBy,omitempty"`
	// ApprovedAt is when the approval was seen.
	// +optional
	ApprovedAt *metav1.Time `json:"approvedAt,omitempty"`
	// Exemption is why the approver let it through a stopped line (ExemptionAnnotation).
	// +optional
	Exemption string `json:"exemption,omitempty"`
}

// Entry is a waiting artifact as a history entry (never published: LastPublished is zero), to
// read, compare or publish it as a kept one.
func (w WaitingArtifact) Entry() ArtifactHistoryEntry {
	return ArtifactHistoryEntry{Digest: w.Digest, Revision: w.Revision, SourceRevision: w.SourceRevision,
		URL: w.URL, Size: w.Size, Objects: w.Objects, Inputs: w.Inputs}
}
