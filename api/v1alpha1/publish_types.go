package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Publish copies each artifact this KCLArtifact publishes out of the cluster.
type Publish struct {
	// OCI pushes each published artifact to an OCI repository as a Flux OCI artifact (what
	// `flux push artifact --reproducible` writes: `flux pull artifact` and an OCIRepository read
	// it), its one layer the stored tarball unchanged, so that the same rendered output is the
	// same OCI digest. It is tagged `kcl-sha256-<hex of the artifact digest>`, and then
	// with spec.publish.oci.tag. A registry that refuses the push sets PushFailed and is tried
	// again; the artifact is published in the cluster all the same.
	// +required
	OCI *OCIPublish `json:"oci"`
}

// OCIPublish is an OCI repository artifacts are pushed to.
type OCIPublish struct {
	// URL of the repository, `oci://<host>[:<port>]/<path>`, without a tag or digest.
	// +kubebuilder:validation:Pattern="^oci://[^@]+$"
	// +kubebuilder:validation:MaxLength=512
	// +required
	URL string `json:"url"`

	// Tag follows what this KCLArtifact publishes: it is moved to each artifact once the
	// artifact, its signature and its provenance are pushed (a spoke's OCIRepository follows it).
	// Defaults to `latest`.
	// +kubebuilder:validation:Pattern="^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$"
	// +optional
	Tag string `json:"tag,omitempty"`

	// SecretRef names a Secret of the KCLArtifact's namespace holding a docker config
	// (`.dockerconfigjson`; `.dockercfg` and `config.json` too) with credentials for the
	// registry, matched as the kubelet matches image pull secrets, as OCIRepository's secretRef.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// Insecure reaches the registry over plain HTTP.
	// +optional
	Insecure bool `json:"insecure,omitempty"`

	// Sign signs each pushed artifact with a cosign key and attaches an in-toto SLSA v1
	// provenance attestation (the source, its revision, the path, the arguments with Secret
	// values as `***`, the engine and the controller), in cosign's tag layout
	// (`sha256-<manifest hex>.sig` and `.att`), which an OCIRepository's spec.verify (provider
	// cosign, the public key) checks. Keyless signing is not supported.
	// +optional
	Sign *OCISign `json:"sign,omitempty"`
}

// OCISign is the cosign key artifacts are signed with.
type OCISign struct {
	// SecretRef names a Secret of the KCLArtifact's namespace holding `cosign.key` (an encrypted
	// cosign private key) and `cosign.password`, as `cosign generate-key-pair
	// k8s://<namespace>/<name>` writes it.
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`
}

// OCIRecord is where an artifact was pushed (status.history[].oci).
type OCIRecord struct {
	// URL of the repository, `oci://<host>[:<port>]/<path>`.
	URL string `json:"url"`
	// Digest of the OCI manifest, `sha256:<hex>`: `<url without oci://>@<digest>` pulls it.
	Digest string `json:"digest"`
	// Tag is the moving tag (spec.publish.oci.tag) it was given when pushed; a newer artifact
	// may have it since.
	// +optional
	Tag string `json:"tag,omitempty"`
	// Signed: its cosign signature and provenance attestation were pushed with it.
	// +optional
	Signed bool `json:"signed,omitempty"`
	// PushedAt is when it was pushed.
	PushedAt metav1.Time `json:"pushedAt"`
}

// OCITag is the moving tag of spec.publish.oci.
func (o *OCIPublish) OCITag() string {
	if o.Tag == "" {
		return "latest"
	}
	return o.Tag
}
