package ociartifact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// Why Verify refused, for errors.Is. Registry and transport errors are returned otherwise
// (wrapped), so that "cannot reach the registry" is not mistaken for "not signed".
var (
	// ErrUnsigned: no signature image at the .sig tag, or one without signature layers.
	ErrUnsigned = errors.New("not signed")
	// ErrBadSignature: signatures are there, none verifies with the key.
	ErrBadSignature = errors.New("no signature verifies with the key")
	// ErrReplayedSignature: a signature by the key verifies, but its payload claims another
	// manifest digest or repository: a signature copied from another image.
	ErrReplayedSignature = errors.New("signature is for another image")
	// ErrNoAttestation: no attestation image at the .att tag, or one without DSSE layers.
	ErrNoAttestation = errors.New("no attestation")
	// ErrBadAttestation: attestations are there, none verifies with the key.
	ErrBadAttestation = errors.New("no attestation verifies with the key")
	// ErrAttestationSubject: an attestation by the key verifies, but its statement is about
	// another digest.
	ErrAttestationSubject = errors.New("attestation is for another image")
)

// Verified is what Verify found: the manifest digest, and the statement of the first attestation
// that verified.
type Verified struct {
	Manifest v1.Hash
	// Statement is the in-toto statement, JSON, as it was signed.
	Statement     []byte
	PredicateType string
}

// Verify checks the artifact at ref (repository@sha256:<manifest>) as `flux kcl verify` does:
// VerifySignature, then VerifyAttestation. opts reach the registry (remote.WithAuth,
// remote.WithTransport, remote.WithContext...); ref carries name.Insecure for plain HTTP. The
// artifact itself is not read: pulled by this digest, its bytes are checked against it.
func Verify(ref name.Digest, v signature.Verifier, opts ...remote.Option) (*Verified, error) {
	h, err := manifestHash(ref)
	if err != nil {
		return nil, err
	}
	if err := VerifySignature(ref, v, opts...); err != nil {
		return nil, err
	}
	st, pt, err := VerifyAttestation(ref, v, opts...)
	if err != nil {
		return nil, err
	}
	return &Verified{Manifest: h, Statement: st, PredicateType: pt}, nil
}

// VerifySignature checks that a layer of the image at the .sig tag verifies with v and that its
// payload claims ref: the manifest digest and the repository. source-controller v1.9.6 checks the
// signature only, so a signature replayed from another image passes there; it fails here with
// ErrReplayedSignature.
func VerifySignature(ref name.Digest, v signature.Verifier, opts ...remote.Option) error {
	h, err := manifestHash(ref)
	if err != nil {
		return err
	}
	tag := ref.Context().Tag(SignatureTag(h))
	sigs, err := cosignLayers(tag, SimpleSigningMediaType, opts)
	if errors.Is(err, errAbsent) || err == nil && len(sigs) == 0 {
		return fmt.Errorf("%s: %w (no signature at %s)", ref, ErrUnsigned, tag)
	}
	if err != nil {
		return err
	}
	var replayed error
	for _, s := range sigs {
		if verifySimpleSigning(s, v) != nil {
			continue
		}
		if err := checkClaim(s.data, ref); err != nil {
			replayed = err
			continue
		}
		return nil
	}
	if replayed != nil {
		return replayed
	}
	return fmt.Errorf("%s: %w (%d signature(s) at %s)", ref, ErrBadSignature, len(sigs), tag)
}

// verifySimpleSigning checks a simple-signing layer's signature annotation against its payload.
func verifySimpleSigning(s blob, v signature.Verifier) error {
	sig, err := base64.StdEncoding.DecodeString(s.ann[AnnotationSignature])
	if err != nil {
		return err
	}
	return v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(s.data))
}

// checkClaim refuses a verified payload that is not about ref. The docker-reference may carry a
// tag or digest (cosign sign --sign-container-identity): its repository is compared.
func checkClaim(p []byte, ref name.Digest) error {
	var c payload.SimpleContainerImage
	if err := json.Unmarshal(p, &c); err != nil {
		return fmt.Errorf("%s: %w: unreadable payload: %v", ref, ErrReplayedSignature, err)
	}
	if c.Critical.Type != payload.CosignSignatureType {
		return fmt.Errorf("%s: %w: payload type %q", ref, ErrReplayedSignature, c.Critical.Type)
	}
	if got := c.Critical.Image.DockerManifestDigest; got != ref.DigestStr() {
		return fmt.Errorf("%s: %w: the signed payload names digest %s, not %s", ref, ErrReplayedSignature, got, ref.DigestStr())
	}
	claimed, err := name.ParseReference(c.Critical.Identity.DockerReference)
	if err != nil || claimed.Context().Name() != ref.Context().Name() {
		return fmt.Errorf("%s: %w: the signed payload names repository %q, not %q", ref, ErrReplayedSignature,
			c.Critical.Identity.DockerReference, ref.Context().Name())
	}
	return nil
}

// manifestHash is ref's digest, which must be sha256 (the cosign tags are built from it).
func manifestHash(ref name.Digest) (v1.Hash, error) {
	h, err := v1.NewHash(ref.DigestStr())
	if err != nil || h.Algorithm != "sha256" {
		return v1.Hash{}, fmt.Errorf("%s: not a sha256 manifest digest", ref)
	}
	return h, nil
}
