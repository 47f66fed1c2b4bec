package ociartifact

import (
	"fmt"
	"regexp"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// digestTagPrefix starts the tag named after an artifact digest. A bare "sha256-<hex>" would be
// the OCI referrers fallback tag form, which cosign's GetBundles (source-controller's first
// look) reads as a list of referrers: the prefix keeps the two apart.
const digestTagPrefix = "kcl-sha256-"

var artifactDigestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// DigestTag is the tag of an artifact's image named after its artifact digest
// ("sha256:<64 lowercase hex>", as status.artifact.digest holds it): "kcl-sha256-<hex>", 75
// characters, within the 128 a tag may have.
func DigestTag(artifactDigest string) (string, error) {
	if !artifactDigestRE.MatchString(artifactDigest) {
		return "", fmt.Errorf("artifact digest %q is not sha256:<64 lowercase hex>", artifactDigest)
	}
	return digestTagPrefix + artifactDigest[len("sha256:"):], nil
}

// SignatureTag is the tag of the cosign signature image of the manifest, "sha256-<hex>.sig".
func SignatureTag(manifest v1.Hash) string { return cosignTag(manifest, "sig") }

// AttestationTag is the tag of its cosign attestation image, "sha256-<hex>.att".
func AttestationTag(manifest v1.Hash) string { return cosignTag(manifest, "att") }

// cosignTag is cosign's legacy tag (pkg/oci/remote normalize): the digest with ':' as '-'.
func cosignTag(h v1.Hash, suffix string) string {
	return h.Algorithm + "-" + h.Hex + "." + suffix
}
