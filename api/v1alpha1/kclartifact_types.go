package v1alpha1

import (
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
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

	// Entries are the KCL files to compile, relative to Path; defaults to the package's
	// kcl.mod [profile] entries, else its .k files, as `kcl run` does.
	// +optional
	Entries []string `json:"entries,omitempty"`

	// Arguments are top-level arguments (`kcl run -D name=value`), read with option();
	// values are typed as kcl types them. They take precedence over ArgumentsFrom.
	// +optional
	Arguments map[string]string `json:"arguments,omitempty"`

	// ArgumentsFrom reads arguments from objects of the namespace (ConfigMaps, Secrets,
	// ImagePolicies, other KCLArtifacts' exports, kinds the operator allows), in order; a later
	// source overrides an earlier one. A change of one renders the program again.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	ArgumentsFrom []ArgumentsReference `json:"argumentsFrom,omitempty"`

	// Exports are values of the render published in status.exports, for other KCLArtifacts of
	// the namespace (argumentsFrom kind KCLArtifact). They change only when an artifact is
	// published, never from a failed render.
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
	// (`.dockerconfigjson`, as kubernetes.io/dockerconfigjson Secrets do) with credentials for
	// the OCI registries of kcl.mod dependencies.
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
}

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
	// Duration the window stays open.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +required
	Duration metav1.Duration `json:"duration"`
	// TimeZone of the schedule, an IANA name; defaults to UTC.
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// Remediation is what is done when the published artifact fails.
type Remediation struct {
	// Retries is how many times the failed phase's Kustomization is reconciled again before the
	// strategy applies.
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

// SourceReference points at a Flux source object.
type SourceReference struct {
	// APIVersion of the source, informational as in Flux's own source references: every kind
	// is read as source.toolkit.fluxcd.io/v1.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`

	// Kind of the source.
	// +kubebuilder:validation:Enum=GitRepository;OCIRepository;Bucket;ExternalArtifact
	// +required
	Kind string `json:"kind"`

	// Name of the source.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
	// +required
	Name string `json:"name"`

	// Namespace of the source; defaults to the KCLArtifact's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// ArgumentsReference reads KCL arguments from an object of the KCLArtifact's namespace.
//
//   - ConfigMap, Secret: each key is an argument name, its value the argument value.
//   - ImagePolicy (image.toolkit.fluxcd.io): the image it selected, as the arguments
//     `<as>.image` (`name:tag`, `@digest` appended when the policy reflects digests), `<as>.name`,
//     `<as>.tag` and `<as>.digest`, all strings.
//   - KCLArtifact: the values another KCLArtifact exports (status.exports), by name.
//   - any other kind the operator allows (--arguments-from-kinds): Values, each a CEL
//     expression or a field path over the object.
type ArgumentsReference struct {
	// APIVersion of the object, `group/version` (`v1` for the core group). Required for kinds
	// other than ConfigMap, Secret, ImagePolicy and KCLArtifact.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`

	// Kind of the object.
	// +kubebuilder:validation:MinLength=1
	// +required
	Kind string `json:"kind"`

	// Name of the object, in the KCLArtifact's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
	// +required
	Name string `json:"name"`

	// Keys selects the keys of a ConfigMap or Secret, or the exports of a KCLArtifact; all of
	// them when empty. A selected key that is missing is an error unless Optional.
	// +optional
	Keys []string `json:"keys,omitempty"`

	// As is the prefix of an ImagePolicy's arguments (`<as>.image`, `<as>.tag`...); defaults to
	// the policy's name.
	// +kubebuilder:validation:Pattern="^[A-Za-z_][A-Za-z0-9_.-]*$"
	// +optional
	As string `json:"as,omitempty"`

	// Values are the arguments read from an object of another kind.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Values []ArgumentValue `json:"values,omitempty"`

	// Optional tolerates a missing object or key, and an ImagePolicy that selected nothing yet.
	// +optional
	Optional bool `json:"optional,omitempty"`
}

// ArgumentValue is one argument read from an object with a CEL expression or a field path.
// Its value must be a string, a number or a bool; a string stays a string in KCL.
type ArgumentValue struct {
	// Name of the argument, read with option("<name>").
	// +kubebuilder:validation:Pattern="^[A-Za-z_][A-Za-z0-9_.-]*$"
	// +required
	Name string `json:"name"`

	// Expression is CEL over `object`, the object as the API server returns it, e.g.
	// `object.spec.clusterIP` or `object.status.inputs.filter(i, i.id == "web")[0].tag`.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Expression string `json:"expression,omitempty"`

	// FieldPath is a path in the object, e.g. `.spec.clusterIP` or
	// `.status.loadBalancer.ingress[0].ip`; exclusive with Expression.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	FieldPath string `json:"fieldPath,omitempty"`
}

// Export is a value of the render that other KCLArtifacts of the namespace can read with
// argumentsFrom kind KCLArtifact.
type Export struct {
	// Name of the export.
	// +kubebuilder:validation:Pattern="^[A-Za-z_][A-Za-z0-9_.-]*$"
	// +required
	Name string `json:"name"`

	// Expression is CEL over `objects`, the rendered objects, e.g.
	// `objects.filter(o, o.kind == "Service")[0].metadata.name`. Its value must be a string, a
	// number or a bool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +required
	Expression string `json:"expression"`
}

// ExportedValue is the value of an export of the published artifact.
type ExportedValue struct {
	// Name of the export.
	Name string `json:"name"`
	// Value as the program reads it: a string, or a number or bool in its literal form.
	Value string `json:"value"`
	// Literal is the value as a KCL argument: a string JSON-quoted, so that "1.10" and the
	// number 1.1 stay apart in the program that reads it.
	Literal string `json:"literal"`
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

// GitCredentials names a Secret for one host, with the keys of a Flux GitRepository HTTPS
// Secret: `username` and `password`, or `bearerToken`, and/or `ca.crt` (or the older `caFile`),
// PEM certificates trusted, besides the system's, for the host's TLS. `insecure: "true"` also
// sends the credentials over plain http.
type GitCredentials struct {
	// Host the credentials are for, with the port when not the default ("github.com",
	// "git.example:8443").
	// +kubebuilder:validation:MinLength=1
	// +required
	Host string `json:"host"`

	// SecretRef names the Secret in the KCLArtifact's namespace.
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`
}

// KustomizationTemplate shapes the generated Kustomization, which is named after the
// KCLArtifact, lives in its namespace and applies its ExternalArtifact. The fields mean what
// they mean on a Flux Kustomization.
type KustomizationTemplate struct {
	// Disabled turns generation off: the ExternalArtifact is still published, for a
	// Kustomization of the user's own. A Kustomization generated before is set to
	// deletionPolicy Orphan and deleted, so what it applied stays for the user's to adopt.
	// +optional
	Disabled bool `json:"disabled,omitempty"`

	// Suspend suspends the generated Kustomizations: kustomize-controller stops applying (and
	// correcting drift), while renders and publishing go on. The generated Kustomizations are the
	// controller's, `flux suspend kustomization` on one is reverted: suspend them here.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Interval of the generated Kustomization; defaults to the KCLArtifact's interval.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// RetryInterval of the generated Kustomization; defaults to the KCLArtifact's retryInterval
	// (and, without one, to the Kustomization's interval, as Flux does).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	RetryInterval *metav1.Duration `json:"retryInterval,omitempty"`

	// Timeout of apply and health checks.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// Prune deletes objects that disappear from the rendered output; defaults to true.
	// +kubebuilder:default=true
	// +optional
	Prune *bool `json:"prune,omitempty"`

	// DeletionPolicy of the generated Kustomization.
	// +kubebuilder:validation:Enum=MirrorPrune;Delete;WaitForTermination;Orphan
	// +optional
	DeletionPolicy string `json:"deletionPolicy,omitempty"`

	// Wait waits for every applied object to become ready.
	// +optional
	Wait bool `json:"wait,omitempty"`

	// Force recreates objects whose immutable fields changed.
	// +optional
	Force bool `json:"force,omitempty"`

	// HealthChecks lists objects to wait for.
	// +optional
	HealthChecks []meta.NamespacedObjectKindReference `json:"healthChecks,omitempty"`

	// HealthCheckExprs are CEL health checks for custom resources.
	// +optional
	HealthCheckExprs []kustomize.CustomHealthCheck `json:"healthCheckExprs,omitempty"`

	// TargetNamespace sets or overrides the namespace of the applied objects.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// ServiceAccountName to impersonate when applying.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`

	// DependsOn lists Kustomizations that must be ready first.
	// +optional
	DependsOn []kustomizev1.DependencyReference `json:"dependsOn,omitempty"`

	// CommonMetadata adds labels and annotations to every applied object.
	// +optional
	CommonMetadata *kustomizev1.CommonMetadata `json:"commonMetadata,omitempty"`

	// NamePrefix is prepended to the names of the applied objects.
	// +kubebuilder:validation:MaxLength=200
	// +optional
	NamePrefix string `json:"namePrefix,omitempty"`

	// NameSuffix is appended to the names of the applied objects.
	// +kubebuilder:validation:MaxLength=200
	// +optional
	NameSuffix string `json:"nameSuffix,omitempty"`

	// Patches applied to the rendered objects (strategic merge or JSON 6902).
	// +optional
	Patches []kustomize.Patch `json:"patches,omitempty"`

	// Images overrides container images.
	// +optional
	Images []kustomize.Image `json:"images,omitempty"`

	// PostBuild substitutes variables in the rendered objects.
	// +optional
	PostBuild *kustomizev1.PostBuild `json:"postBuild,omitempty"`

	// Decryption of SOPS-encrypted values in the rendered objects.
	// +kubebuilder:validation:XValidation:rule="!has(self.secretRef) || size(self.secretRef.name) <= 253 && self.secretRef.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="secretRef.name must be a Kubernetes object name (an RFC 1123 subdomain)"
	// +kubebuilder:validation:XValidation:rule="!has(self.serviceAccountName) || size(self.serviceAccountName) <= 253 && self.serviceAccountName.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="serviceAccountName must be a ServiceAccount name (an RFC 1123 subdomain)"
	// +optional
	Decryption *kustomizev1.Decryption `json:"decryption,omitempty"`

	// KubeConfig applies to a remote cluster.
	// +kubebuilder:validation:XValidation:rule="!has(self.secretRef) || size(self.secretRef.name) <= 253 && self.secretRef.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="secretRef.name must be a Kubernetes object name (an RFC 1123 subdomain)"
	// +kubebuilder:validation:XValidation:rule="!has(self.configMapRef) || size(self.configMapRef.name) <= 253 && self.configMapRef.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="configMapRef.name must be a Kubernetes object name (an RFC 1123 subdomain)"
	// +optional
	KubeConfig *meta.KubeConfigReference `json:"kubeConfig,omitempty"`

	// Phases sets what differs per deploy phase. Objects the program annotates with
	// kcl.contrib.fluxcd.io/phase: pre or post (or with a Helm or Argo CD hook) are applied by
	// Kustomizations <name>-pre, before the others, and <name>-post, after them.
	// +optional
	Phases *PhaseTemplates `json:"phases,omitempty"`
}

// PhaseTemplates are the per-phase settings of the generated Kustomizations.
type PhaseTemplates struct {
	// Pre is the phase applied and waited for before everything else.
	// +optional
	Pre *PhaseTemplate `json:"pre,omitempty"`
	// Main is the phase of the objects without a phase.
	// +optional
	Main *PhaseTemplate `json:"main,omitempty"`
	// Post is the phase applied once main is healthy.
	// +optional
	Post *PhaseTemplate `json:"post,omitempty"`
}

// PhaseTemplate overrides the template for one phase's Kustomization.
type PhaseTemplate struct {
	// Timeout of this phase's apply and health checks (for pre and post, the Jobs' runs);
	// defaults to the template's timeout.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// LocalObjectReference names an object of the KCLArtifact's namespace (a Secret).
type LocalObjectReference struct {
	// Name of the object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
	// +required
	Name string `json:"name"`
}

// ObjectReference identifies one rendered object.
type ObjectReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// KCLArtifactStatus is the observed state of a KCLArtifact.
type KCLArtifactStatus struct {
	meta.ReconcileRequestStatus `json:",inline"`

	// ObservedGeneration is the last reconciled generation.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Reconciling, Stalled and KustomizationReady.
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
	// Gates are the state of each gate for it, in order: upstream, soak, window, approval.
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
)

// GateStatus is one gate's state for a waiting artifact.
type GateStatus struct {
	// Name of the gate: upstream, soak, window or approval.
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
}

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

// PhaseStatus is the state of one deploy phase.
type PhaseStatus struct {
	// Name of the phase: pre, main or post.
	Name string `json:"name"`
	// Objects is the number of objects of the phase in the current artifact.
	Objects int `json:"objects"`
	// Kustomization is the generated Kustomization that applies the phase.
	// +optional
	Kustomization string `json:"kustomization,omitempty"`
	// State of the phase at the current artifact: Waiting (for the phase before it), Applying,
	// Ready or Failed.
	// +optional
	State string `json:"state,omitempty"`
	// Message says why the phase is not Ready: for a failed Job, which Job and why.
	// +optional
	Message string `json:"message,omitempty"`
}

// ArtifactHistoryEntry is an artifact kept in storage.
type ArtifactHistoryEntry struct {
	// Digest of the artifact.
	Digest string `json:"digest"`
	// Revision of the artifact, `<ref>@<digest>`.
	Revision string `json:"revision"`
	// SourceRevision is the source revision it was rendered from.
	// +optional
	SourceRevision string `json:"sourceRevision,omitempty"`
	// URL where the artifact is served.
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
	// Inputs are the arguments it was rendered with (Secret values masked); empty for an
	// artifact rendered before inputs were recorded.
	// +optional
	Inputs []InputValue `json:"inputs,omitempty"`
	// Missing is true when its file is no longer in storage, or no longer has its digest (an
	// emptyDir storage lost in a restart): it cannot be pinned or rolled back to.
	// +optional
	Missing bool `json:"missing,omitempty"`

	// Promotion, for a stage, is the upstream artifact that proved its inputs and the approval.
	// +optional
	Promotion *PromotionRecord `json:"promotion,omitempty"`
}

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

// Entry is a waiting artifact as a history entry (never published: LastPublished is zero), to
// read, compare or publish it as a kept one.
func (w WaitingArtifact) Entry() ArtifactHistoryEntry {
	return ArtifactHistoryEntry{Digest: w.Digest, Revision: w.Revision, SourceRevision: w.SourceRevision,
		URL: w.URL, Size: w.Size, Objects: w.Objects, Inputs: w.Inputs}
}
