package v1alpha1

// Condition types beyond the standard Ready, Reconciling and Stalled.
const (
	// KustomizationReadyCondition mirrors the Ready condition of the generated Kustomization, so one
	// `kubectl get kclartifacts` shows both the render and the apply.
	KustomizationReadyCondition string = "KustomizationReady"
	// RemediatedCondition says what spec.remediation did about a failed artifact.
	RemediatedCondition string = "Remediated"
	// PromotedCondition says, for a stage (spec.promotion), whether it serves the newest artifact
	// its gates let through, or what it waits for and since when.
	PromotedCondition string = "Promoted"
	// PushFailedCondition is True while spec.publish.oci could not push the current artifact
	// (the reason says why: PushFailed or SignFailed); it is removed once the push
	// succeeds. The artifact is published in the cluster either way.
	PushFailedCondition string = "PushFailed"
)

// Condition reasons.
const (
	// ArtifactUpToDateReason: the inputs did not change, nothing was rendered.
	ArtifactUpToDateReason string = "ArtifactUpToDate"
	// SourceNotFoundReason: the source object does not exist.
	SourceNotFoundReason string = "SourceNotFound"
	// SourceNotReadyReason: the source has no artifact yet.
	SourceNotReadyReason string = "SourceNotReady"
	// FetchFailedReason: the source artifact could not be downloaded, verified or extracted.
	FetchFailedReason string = "FetchFailed"
	// ArgumentsFailedReason: an object named by argumentsFrom is missing or unreadable, or an
	// expression over it failed.
	ArgumentsFailedReason string = "ArgumentsFailed"
	// InputNotReadyReason: an input of argumentsFrom is not there yet: an ImagePolicy that has
	// not selected an image or is not Ready, a KCLArtifact that exports nothing yet.
	InputNotReadyReason string = "InputNotReady"
	// ExportCycleReason: KCLArtifacts read each other's exports in a cycle.
	ExportCycleReason string = "ExportCycle"
	// ExportFailedReason: an expression of spec.exports failed on the rendered objects; the
	// artifact was not published.
	ExportFailedReason string = "ExportFailed"
	// DependencyFailedReason: a kcl.mod dependency could not be resolved, fetched or verified.
	DependencyFailedReason string = "DependencyFailed"
	// RenderFailedReason: KCL reported an error, or the engine worker failed.
	RenderFailedReason string = "RenderFailed"
	// InvalidPathReason: an entry, settings file, kcl.mod [profile] entry or external points
	// outside the source.
	InvalidPathReason string = "InvalidPath"
	// WorkerProtocolViolationReason: the engine worker answered out of protocol (something other
	// than its loop wrote to the channel); it was killed and its answer discarded.
	WorkerProtocolViolationReason string = "WorkerProtocolViolation"
	// OutputLimitExceededReason: the rendered output is larger, or has more objects, than the
	// controller accepts (--kcl-max-output-size, --kcl-max-objects).
	OutputLimitExceededReason string = "OutputLimitExceeded"
	// InvalidOutputReason: the rendered documents are not Kubernetes objects.
	InvalidOutputReason string = "InvalidOutput"
	// StorageFailedReason: the artifact could not be archived or stored.
	StorageFailedReason string = "StorageFailed"
	// PushFailedReason: the registry of spec.publish.oci refused the push or could not be
	// reached, or the push process failed; it is tried again with backoff.
	PushFailedReason string = "PushFailed"
	// SignFailedReason: the cosign key of spec.publish.oci.sign is missing or unreadable, or
	// signing failed.
	SignFailedReason string = "SignFailed"
	// PublishFailedReason: the ExternalArtifact or Kustomization could not be written.
	PublishFailedReason string = "PublishFailed"
	// PinnedReason: spec.pinnedDigest publishes a kept artifact instead of rendering.
	PinnedReason string = "Pinned"
	// StatusRepairedReason: status named an artifact that is not this KCLArtifact's own (a path
	// of another object, a file name the store does not write); the controller rewrote it.
	StatusRepairedReason string = "StatusRepaired"
	// PinnedArtifactNotFoundReason: spec.pinnedDigest names no artifact in status.history.
	PinnedArtifactNotFoundReason string = "PinnedArtifactNotFound"
	// KustomizationSuspendedReason: the generated Kustomization is suspended
	// (spec.kustomization.suspend) and has not applied the current artifact.
	KustomizationSuspendedReason string = "KustomizationSuspended"
	// PhaseFailedReason: a deploy phase's Kustomization failed (for pre and post, typically a
	// Job); the phases after it wait.
	PhaseFailedReason string = "PhaseFailed"
	// RolledBackReason: the artifact failed and the newest healthy one is published instead.
	RolledBackReason string = "RolledBack"
	// RollbackFailedReason: the artifact rolled back to failed too; nothing more is done until
	// the inputs change or reconcile.fluxcd.io/resetAt.
	RollbackFailedReason string = "RollbackFailed"
	// NothingToRollBackToReason: the artifact failed and no other history entry is healthy and
	// in storage.
	NothingToRollBackToReason string = "NothingToRollBackTo"
	// RemediationUnavailableReason: spec.remediation cannot act (no Kustomization is generated).
	RemediationUnavailableReason string = "RemediationUnavailable"
	// PromotedReason: the stage serves the newest artifact whose gates are open.
	PromotedReason string = "Promoted"
	// UpstreamNotHealthyReason: the upstream has not run the waiting inputs healthy (yet), or
	// moved on to inputs that are not healthy.
	UpstreamNotHealthyReason string = "UpstreamNotHealthy"
	// UpstreamFailedReason: the upstream saw the waiting inputs fail, roll back or be
	// quarantined: they are never promoted.
	UpstreamFailedReason string = "UpstreamFailed"
	// UpstreamNotFoundReason: the upstream KCLArtifact does not exist.
	UpstreamNotFoundReason string = "UpstreamNotFound"
	// WaitingForSoakReason: the upstream runs the inputs healthy, not yet for spec.promotion.soak.
	WaitingForSoakReason string = "WaitingForSoak"
	// OutsideWindowReason: no window of spec.promotion.windows is open.
	OutsideWindowReason string = "OutsideWindow"
	// WaitingForApprovalReason: the artifact waits for a person's approval of its digest.
	WaitingForApprovalReason string = "WaitingForApproval"
	// PromotionCycleReason: the stages follow each other in a cycle.
	PromotionCycleReason string = "PromotionCycle"
	// InvalidWindowReason: a window of spec.promotion.windows does not parse.
	InvalidWindowReason string = "InvalidWindow"
	// LineStoppedReason: the line is stopped (StopTheLineAnnotation on the stage's namespace or
	// on the controller's): no stage publishes a new artifact until it is resumed, except one
	// an approver exempts (ExemptionAnnotation).
	LineStoppedReason string = "LineStopped"
	// ApprovalRejectedReason: an approval names a digest that is not waiting.
	ApprovalRejectedReason string = "ApprovalRejected"
	// DriftRevertedReason: someone else changed a generated Kustomization or ExternalArtifact
	// (its spec, labels, owner references, or the ExternalArtifact's status); the controller put
	// it back as spec.kustomization and the artifact say. The event names the fields and the
	// field managers that changed them, never their values.
	DriftRevertedReason string = "DriftReverted"
	// InvalidReferenceReason: a name or namespace the spec refers to is not one a Kubernetes
	// object can have (the CRD refuses it; an object stored before it did is stalled, never
	// retried).
	InvalidReferenceReason string = "InvalidReference"
)

// States of a deploy phase (status.phases[].state).
const (
	PhaseWaiting  = "Waiting"
	PhaseApplying = "Applying"
	PhaseReady    = "Ready"
	PhaseFailed   = "Failed"
)

// ResetRequestAnnotation resets remediation (failure count and quarantine), as
// `flux reconcile helmrelease --reset` does for a HelmRelease; it is set with
// reconcile.fluxcd.io/requestedAt, whose change triggers the reconciliation.
const ResetRequestAnnotation = "reconcile.fluxcd.io/resetAt"

// ApproveAnnotation approves a waiting artifact of a stage by digest (`flux kcl approve`, or
// `kubectl annotate kclartifact <name> kcl.contrib.fluxcd.io/approve=<digest>`).
const ApproveAnnotation = "kcl.contrib.fluxcd.io/approve"

// ApprovedByAnnotation names who approved, as `flux kcl approve` reads it from the API server
// (a SelfSubjectReview); recorded with the approval.
const ApprovedByAnnotation = "kcl.contrib.fluxcd.io/approved-by"

// StopTheLineAnnotation, on a Namespace, stops the line of that namespace: no stage
// (spec.promotion) in it publishes a new artifact while it is set; its value is why. On the
// namespace the controller runs in ($RUNTIME_NAMESPACE), it stops the line of every namespace.
// Rollbacks, pins and KCLArtifacts without spec.promotion go on. `flux kcl stop-line` sets it
// with StoppedByAnnotation and StoppedAtAnnotation; `flux kcl resume-line` removes them.
const StopTheLineAnnotation = "kcl.contrib.fluxcd.io/stop-the-line"

// StoppedByAnnotation names who stopped the line; the admission policy (config/admission)
// requires it to be the user who sets StopTheLineAnnotation.
const StoppedByAnnotation = "kcl.contrib.fluxcd.io/stopped-by"

// StoppedAtAnnotation is when the line was stopped (RFC 3339), for the stages' messages.
const StoppedAtAnnotation = "kcl.contrib.fluxcd.io/stopped-at"

// ExemptionAnnotation, on a stage, beside an approval (ApproveAnnotation) of a waiting digest,
// lets that artifact through a stopped line; its value is why (the hotfix). Like an approval it
// needs the verb approve, and history records it with the approver.
const ExemptionAnnotation = "kcl.contrib.fluxcd.io/exemption"

// FollowersAnnotation, on an upstream KCLArtifact, lists the namespaces whose stages may follow
// it (comma-separated namespace names, or `*` for every namespace), as Flux's accessFrom lets a
// producer consent to readers in other namespaces. A stage in another namespace follows an
// upstream only with this consent, whatever --no-cross-namespace-refs says: the upstream's owner
// decides who reads its health and inputs.
const FollowersAnnotation = "kcl.contrib.fluxcd.io/followers"
