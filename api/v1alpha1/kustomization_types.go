package v1alpha1

import (
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/kustomize"
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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
	// Kustomizations `<name>-pre`, before the others, and `<name>-post`, after them.
	// +optional
	Phases *PhaseTemplates `json:"phases,omitempty"`
}
