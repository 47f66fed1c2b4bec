// Package ociartifact builds the OCI copy of a rendered artifact and its cosign signature and
// attestation images, and verifies them. It is pure: it reads the artifact file and builds
// go-containerregistry images in memory; pushing them (network policy, credentials, a confined
// child process) is the caller's business. Only Verify talks to a registry, through the
// remote options it is given.
//
// # The artifact image is Flux's
//
// The image is what `flux push artifact --reproducible` writes (fluxcd/pkg/oci push.go), so an
// OCIRepository reads it like any Flux artifact: an OCI manifest, config media type
// application/vnd.cncf.flux.config.v1+json, one layer application/vnd.cncf.flux.content.v1.tar+gzip,
// and the created, source and revision annotations. Two choices differ from calling fluxcd/pkg/oci:
//
//   - The layer is the stored .tar.gz unchanged, not a tarball made again from a directory (Flux's
//     Push re-tars with the modes found on disk). So the layer digest is the artifact digest
//     already in status.artifact and status.history: the copy in the registry is provably the
//     same bytes, and a restore checks what it pulls against the digest it recorded. Image
//     checks this equality itself rather than trust it.
//   - created is always 1970-01-01T00:00:00Z, as --reproducible writes it: the same tarball with
//     the same Meta always gives the same manifest digest, so pushing again is a no-op and a
//     digest names the content, not the moment of the push.
//
// # Signatures: cosign's legacy layout, with a claim check
//
// The verifier that matters is source-controller v1.9.6 (cosign v3.0.6, public-key mode,
// offline, no transparency log). It looks for sigstore bundles through the referrers API first
// and, when it finds none, falls back to cosign's legacy layout: the signature image at tag
// sha256-<manifest hex>.sig and the attestation at sha256-<manifest hex>.att in the same
// repository. Once it finds a bundle it takes the bundle path and no longer reads the legacy
// images, so only the legacy images are written, never a sigstore bundle referrer.
//
// source-controller never checks the signed payload's claim (which manifest digest and which
// repository it names), only that some layer at the .sig tag verifies with the key. Anyone who
// can write a tag in the repository can therefore copy an old signature by the same key onto
// another manifest's .sig tag and make it pass there. Verify, which `flux kcl verify` runs,
// checks the claim as cosign's CLI does (and the repository besides) and refuses such a replay
// with ErrReplayedSignature.
//
// # Publishing
//
// The caller pushes, in this order: the artifact image at DigestTag (so that it has a tag of its
// own), SignatureImage at SignatureTag, AttestationImage at AttestationTag, and only then moves
// the tag OCIRepositories follow. Moved first, a spoke could fetch a digest whose signature is
// not there yet and mark its source unverified. DigestTag is named after the artifact digest,
// not the manifest's: two pushes of one tarball with different Meta share it, the last one wins.
//
// # Keys
//
// Keys are cosign's files: cosign.key (scrypt + secretbox encrypted PKCS #8, PEM type
// "ENCRYPTED SIGSTORE PRIVATE KEY" or the older "ENCRYPTED COSIGN PRIVATE KEY"), cosign.password
// and cosign.pub (PKIX PEM), as `cosign generate-key-pair k8s://ns/name` writes them into a
// Secret. Signatures always hash with SHA-256, because source-controller loads every public key
// with signature.LoadVerifier(pub, crypto.SHA256).
package ociartifact
