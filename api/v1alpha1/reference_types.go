package v1alpha1

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

	// Namespace of the source; defaults to the KCLArtifact's namespace. Another namespace is
	// refused when the controller runs with `--no-cross-namespace-refs`.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// GitCredentials names a Secret for one host, with the keys of a Flux GitRepository HTTPS
// Secret: `username` and `password`, or `bearerToken`, and/or `ca.crt` (or the older `caFile`),
// PEM certificates trusted, besides the system's, for the host's TLS. The credentials are sent
// only over HTTPS to exactly that host and port (redirects elsewhere drop them); `insecure:
// "true"` also sends them over plain HTTP. `tls.crt`/`tls.key` are not supported.
type GitCredentials struct {
	// Host the credentials are for, `name` or `name:port` (`github.com`, `git.example:8443`);
	// without a port, 443 (80 over plain HTTP).
	// +kubebuilder:validation:MinLength=1
	// +required
	Host string `json:"host"`

	// SecretRef names the Secret in the KCLArtifact's namespace.
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`
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
