package v1alpha1

import (
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// KCLArtifactKind is the kind of KCLArtifact objects.
	KCLArtifactKind = "KCLArtifact"
	// Finalizer lets the controller remove artifacts and generated objects before deletion.
	Finalizer = "kcl.contrib.fluxcd.io/finalizer"
)

// KCLArtifactSpec names a KCL program in a Flux source and how to render it.
type KCLArtifactSpec struct {
	// SourceRef is the Flux source holding the KCL program.
	// +required
	SourceRef SourceReference `json:"sourceRef"`

	// Path of the KCL package inside the source; defaults to its root.
	// +optional
	Path string `json:"path,omitempty"`

	// Interval at which the program is rendered again even when nothing changed.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +required
	Interval metav1.Duration `json:"interval"`

	// RetryInterval is how soon a failed render is tried again; defaults to Interval.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	RetryInterval *metav1.Duration `json:"retryInterval,omitempty"`

	// Timeout bounds one reconciliation: fetch, render and publish. Defaults to 3m.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// Suspend stops reconciliation; what was published stays published.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// HistoryLimit is the number of distinct artifacts kept in storage, downloadable and listed
	// in status.history, the current one included. With spec.remediation, the newest healthy
	// artifact is kept beyond it until a newer one is healthy: it is the rollback target.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=50
	// +kubebuilder:default=5
	// +optional
	HistoryLimit *int `json:"historyLimit,omitempty"`

	// PinnedDigest publishes the kept artifact of this digest (one of status.history) instead of
	// rendering: a declarative rollback. Removing it resumes rendering.
	// +kubebuilder:validation:Pattern="^[a-z0-9]+:[a-f0-9]+$"
	// +optional
	PinnedDigest string `json:"pinnedDigest,omitempty"`

	// Entries are the KCL files to compile, relative to Path; defaults to the files the settings
	// files list, else the package's kcl.mod [profile] entries, else its .k files, as `kcl run`
	// does.
	// +optional
	Entries []string `json:"entries,omitempty"`

	// Arguments are top-level arguments (`kcl run -D name=value`), read with `option()`;
	// values are typed as kcl types them: a value that is JSON is that JSON value (`"1.10"` is
	// the float 1.1, `'"1.10"'` the string). They take precedence over ArgumentsFrom.
	// +optional
	Arguments map[string]string `json:"arguments,omitempty"`

	// ArgumentsFrom reads arguments from objects of the namespace (ConfigMaps, Secrets,
	// ImagePolicies, other KCLArtifacts' exports, kinds the operator allows), in order; a later
	// source overrides an earlier one. A change of a watched one renders the program again:
	// ImagePolicies, exporting KCLArtifacts and allowed kinds are watched, ConfigMaps and
	// Secrets when labelled `reconcile.fluxcd.io/watch: Enabled`.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	ArgumentsFrom []ArgumentsReference `json:"argumentsFrom,omitempty"`

	// Exports are values of the render published in status.exports, for other KCLArtifacts of
	// the namespace (argumentsFrom kind KCLArtifact). They change only when an artifact is
	// published, never from a failed render. A KCLArtifact that reads a Secret exports nothing
	// (ExportFailed).
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Exports []Export `json:"exports,omitempty"`

	// Settings are kcl.yaml settings files (`kcl run -Y`), relative to Path.
	// +optional
	Settings []string `json:"settings,omitempty"`

	// Overrides change values of the main package (`kcl run -O path=value`, `path:value` or
	// `path-`); string values are quoted KCL literals, e.g. `config.image="nginx:2"`.
	// +optional
	Overrides []string `json:"overrides,omitempty"`

	// PathSelectors select what is output (`kcl run -S path`, a path of the main package).
	// +optional
	PathSelectors []string `json:"pathSelectors,omitempty"`

	// SortKeys sorts the keys of the output (`kcl run -k`).
	// +optional
	SortKeys bool `json:"sortKeys,omitempty"`

	// ShowHidden outputs hidden attributes (`kcl run -H`).
	// +optional
	ShowHidden bool `json:"showHidden,omitempty"`

	// DisableNone drops attributes whose value is None (`kcl run -n`).
	// +optional
	DisableNone bool `json:"disableNone,omitempty"`

	// StrictRangeCheck checks numeric ranges strictly (`kcl run -r`).
	// +optional
	StrictRangeCheck bool `json:"strictRangeCheck,omitempty"`

	// RegistrySecretRef names a Secret in the KCLArtifact's namespace holding a docker config
	// (`.dockerconfigjson`, as kubernetes.io/dockerconfigjson Secrets do; `.dockercfg` and
	// `config.json` are read too) with credentials for the OCI registries of kcl.mod
	// dependencies, matched as the kubelet matches image pull secrets (the longest path wins,
	// `*.azurecr.io` globs); `credsStore` and `credHelpers` are never run.
	// +optional
	RegistrySecretRef *LocalObjectReference `json:"registrySecretRef,omitempty"`

	// GitCredentials are credentials and CA certificates for Git dependencies over HTTPS, each
	// used only for its host.
	// +optional
	GitCredentials []GitCredentials `json:"gitCredentials,omitempty"`

	// Kustomization is the template of the Kustomization generated to apply the artifact.
	// +optional
	Kustomization *KustomizationTemplate `json:"kustomization,omitempty"`

	// Remediation, when set, acts on an artifact that fails to apply or its health checks in any
	// phase: its Kustomization is retried, then the newest healthy artifact of status.history is
	// published again and the failed one quarantined. Unset, a failed artifact stays published.
	// +optional
	Remediation *Remediation `json:"remediation,omitempty"`

	// Promotion makes this KCLArtifact a stage that follows an upstream KCLArtifact (of its
	// namespace, or of another that consents): it renders each new set of inputs ahead, and publishes one only once the
	// upstream ran the same inputs (source revision and shared cluster inputs) healthy and the
	// gates are open.
	// +optional
	Promotion *Promotion `json:"promotion,omitempty"`

	// Publish copies each artifact published out of the cluster: signed to an OCI repository,
	// for clusters that pull it (docs/fleets.md).
	// +optional
	Publish *Publish `json:"publish,omitempty"`

	// Verify runs checks by metrics after the artifact is applied healthy: an artifact that
	// fails them is rolled back where spec.remediation is set, and the stages following this
	// KCLArtifact promote only what passed them.
	// +optional
	Verify *Verify `json:"verify,omitempty"`
}

// KCLArtifactStatus is the observed state of a KCLArtifact.
type KCLArtifactStatus struct {
	meta.ReconcileRequestStatus `json:",inline"`

	// ObservedGeneration is the last reconciled generation.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Reconciling, Stalled, KustomizationReady, Remediated (spec.remediation)
	// and Promoted (spec.promotion).
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Artifact is the artifact currently published.
	// +optional
	Artifact *meta.Artifact `json:"artifact,omitempty"`

	// SourceRevision is the source revision the current artifact was rendered from.
	// +optional
	SourceRevision string `json:"sourceRevision,omitempty"`

	// LastAttemptedRevision is the source revision of the last attempt, failed or not.
	// +optional
	LastAttemptedRevision string `json:"lastAttemptedRevision,omitempty"`

	// InputDigest identifies the inputs of the current artifact: source digest, spec,
	// argument values and engine version. Equal inputs are not rendered again.
	// +optional
	InputDigest string `json:"inputDigest,omitempty"`

	// ExternalArtifactRef is the published ExternalArtifact.
	// +optional
	ExternalArtifactRef *meta.NamespacedObjectReference `json:"externalArtifactRef,omitempty"`

	// KustomizationRef is the generated Kustomization.
	// +optional
	KustomizationRef *meta.NamespacedObjectReference `json:"kustomizationRef,omitempty"`

	// Inventory lists the objects of the current artifact, sorted by kind, namespace and name;
	// at most the first 1,000, so that the KCLArtifact stays small whatever its output.
	// +optional
	Inventory []ObjectReference `json:"inventory,omitempty"`

	// InventoryCount is the number of objects of the current artifact.
	// +optional
	InventoryCount int `json:"inventoryCount,omitempty"`

	// History lists the kept artifacts, newest first; the first is the one published last.
	// +optional
	History []ArtifactHistoryEntry `json:"history,omitempty"`

	// Rejected are the releases this KCLArtifact's kcl.contrib.fluxcd.io/reject annotation marks
	// bad, resolved to their inputs; the pipeline's stages read them.
	// +optional
	Rejected []RejectedRelease `json:"rejected,omitempty"`

	// Phases are the deploy phases of the current artifact, in the order they are applied, when
	// it has objects in another phase than main.
	// +optional
	Phases []PhaseStatus `json:"phases,omitempty"`

	// Phase sums up the deploy phases: the phase applying or failed, or Ready.
	// +optional
	Phase string `json:"phase,omitempty"`

	// Exports are the values of spec.exports in the published artifact.
	// +optional
	Exports []ExportedValue `json:"exports,omitempty"`

	// LastHandledResetAt is the last reconcile.fluxcd.io/resetAt handled: a new value clears the
	// failure count and the quarantine, and the inputs' artifact is tried again.
	// +optional
	LastHandledResetAt string `json:"lastHandledResetAt,omitempty"`

	// Remediation is the state of spec.remediation.
	// +optional
	Remediation *RemediationStatus `json:"remediation,omitempty"`

	// Promotion is the state of spec.promotion: the artifacts rendered ahead and their gates.
	// +optional
	Promotion *PromotionStatus `json:"promotion,omitempty"`
}

// +genclient
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=kclart,categories=all;fluxcd;fluxcd-sources
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description=""
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status",description=""
// +kubebuilder:printcolumn:name="Status",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].message",description=""
// +kubebuilder:printcolumn:name="Applied",type="string",JSONPath=".status.conditions[?(@.type==\"KustomizationReady\")].status",description=""
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase",description=""
// +kubebuilder:printcolumn:name="Remediated",type="string",JSONPath=".status.conditions[?(@.type==\"Remediated\")].reason",description=""
// +kubebuilder:printcolumn:name="Upstream",type="string",JSONPath=".spec.promotion.from.name",description=""
// +kubebuilder:printcolumn:name="Gate",type="string",JSONPath=".status.conditions[?(@.type==\"Promoted\")].reason",description=""
// +kubebuilder:printcolumn:name="Revision",type="string",JSONPath=".status.artifact.revision",priority=1,description=""
// +kubebuilder:metadata:annotations="kustomize.toolkit.fluxcd.io/substitute=disabled"

// KCLArtifact renders a KCL program from a Flux source into a Flux ExternalArtifact and a
// Kustomization that applies it.
type KCLArtifact struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec KCLArtifactSpec `json:"spec,omitempty"`
	// +kubebuilder:default={"observedGeneration":-1}
	Status KCLArtifactStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// KCLArtifactList contains a list of KCLArtifact.
type KCLArtifactList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []KCLArtifact `json:"items"`
}

func init() {
	SchemeBuilder.Register(&KCLArtifact{}, &KCLArtifactList{})
}

// GetConditions returns the status conditions (runtime/conditions.Getter).
func (in *KCLArtifact) GetConditions() []metav1.Condition { return in.Status.Conditions }

// SetConditions sets the status conditions (runtime/conditions.Setter).
func (in *KCLArtifact) SetConditions(c []metav1.Condition) { in.Status.Conditions = c }

// GetArtifact returns the published artifact.
func (in *KCLArtifact) GetArtifact() *meta.Artifact { return in.Status.Artifact }

// GetRequeueAfter is the interval after which the object is reconciled again.
func (in *KCLArtifact) GetRequeueAfter() time.Duration { return in.Spec.Interval.Duration }

// GetRetryInterval is the interval after which a failed reconciliation is retried.
func (in *KCLArtifact) GetRetryInterval() time.Duration {
	if in.Spec.RetryInterval != nil {
		return in.Spec.RetryInterval.Duration
	}
	return in.Spec.Interval.Duration
}

// GetTimeout bounds one reconciliation.
func (in *KCLArtifact) GetTimeout() time.Duration {
	if in.Spec.Timeout != nil {
		return in.Spec.Timeout.Duration
	}
	return 3 * time.Minute
}

// DefaultHistoryLimit is the number of artifacts kept when spec.historyLimit is not set.
const DefaultHistoryLimit = 5

// GetHistoryLimit is spec.historyLimit, or its default.
func (in *KCLArtifact) GetHistoryLimit() int {
	if in.Spec.HistoryLimit == nil || *in.Spec.HistoryLimit < 1 {
		return DefaultHistoryLimit
	}
	return *in.Spec.HistoryLimit
}

// KustomizationEnabled tells whether a Kustomization is generated.
func (in *KCLArtifact) KustomizationEnabled() bool {
	return in.Spec.Kustomization == nil || !in.Spec.Kustomization.Disabled
}
