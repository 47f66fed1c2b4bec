package ociartifact

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact/ociartifacttest"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/kcl-flux/kcl-artifact-controller/internal/provenance"
)

// The whole path with cosign key files: generate, sign, attest, push, verify.
func TestSignVerifyRoundTrip(t *testing.T) {
	repo := newRepository(t)
	keyPEM, pubPEM, err := GenerateKeyPair([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := LoadSigner(keyPEM, []byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadVerifier(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	ref := artifact(t, repo, "a: 1\n")
	sign(t, s, ref)
	st := attest(t, s, ref, "")
	got, err := Verify(ref, v)
	if err != nil {
		t.Fatal(err)
	}
	if got.Manifest.String() != ref.DigestStr() || got.PredicateType != provenance.PredicateType || !bytes.Equal(got.Statement, st) {
		t.Errorf("Verify = %s %s %s, want %s, the SLSA provenance, the statement signed", got.Manifest, got.PredicateType, got.Statement, ref.DigestStr())
	}
}

func TestVerifyWithAnotherKeyFails(t *testing.T) {
	repo := newRepository(t)
	s := newKey(t)
	ref := artifact(t, repo, "a: 1\n")
	sign(t, s, ref)
	attest(t, s, ref, "")
	_, err := Verify(ref, newKey(t))
	if !errors.Is(err, ErrBadSignature) {
		t.Errorf("error %v, want ErrBadSignature", err)
	}
	if _, _, err := VerifyAttestation(ref, newKey(t)); !errors.Is(err, ErrBadAttestation) {
		t.Errorf("attestation: error %v, want ErrBadAttestation", err)
	}
}

func TestVerifyUnsignedFails(t *testing.T) {
	repo := newRepository(t)
	ref := artifact(t, repo, "a: 1\n")
	_, err := Verify(ref, newKey(t))
	if !errors.Is(err, ErrUnsigned) || !strings.Contains(err.Error(), "not signed") ||
		!strings.Contains(err.Error(), SignatureTag(ociartifacttest.Hash(t, ref))) {
		t.Errorf("error %v, want ErrUnsigned naming the .sig tag", err)
	}
}

// source-controller v1.9.6 accepts this (it never reads the claim); Verify must not.
func TestVerifyRefusesASignatureReplayedFromAnotherArtifact(t *testing.T) {
	repo := newRepository(t)
	s := newKey(t)
	a := artifact(t, repo, "a: 1\n")
	sign(t, s, a)
	b := artifact(t, repo, "a: 2\n")
	attest(t, s, b, "")
	copyImage(t, repo+":"+SignatureTag(ociartifacttest.Hash(t, a)), repo, SignatureTag(ociartifacttest.Hash(t, b)))

	_, err := Verify(b, s)
	if !errors.Is(err, ErrReplayedSignature) {
		t.Fatalf("error %v, want ErrReplayedSignature", err)
	}
	want := "names digest " + a.DigestStr() + ", not " + b.DigestStr()
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

// The same manifest pushed to another repository, with the first repository's signature.
func TestVerifyRefusesASignatureForAnotherRepository(t *testing.T) {
	repo := newRepository(t)
	s := newKey(t)
	a := artifact(t, repo, "a: 1\n")
	sign(t, s, a)
	other := strings.TrimSuffix(repo, "/app") + "/other"
	copyImage(t, a.String(), other, "latest")
	copyImage(t, repo+":"+SignatureTag(ociartifacttest.Hash(t, a)), other, SignatureTag(ociartifacttest.Hash(t, a)))

	otherRef, err := name.NewDigest(other+"@"+a.DigestStr(), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	err = VerifySignature(otherRef, s)
	if !errors.Is(err, ErrReplayedSignature) || !strings.Contains(err.Error(), "names repository") {
		t.Errorf("error %v, want ErrReplayedSignature naming the repository", err)
	}
}

// A valid signature by the key of a statement about another digest, at this digest's .att tag.
func TestVerifyRefusesAnAttestationForAnotherDigest(t *testing.T) {
	repo := newRepository(t)
	s := newKey(t)
	a := artifact(t, repo, "a: 1\n")
	b := artifact(t, repo, "a: 2\n")
	sign(t, s, b)
	attest(t, s, b, a.DigestStr())

	_, err := Verify(b, s)
	if !errors.Is(err, ErrAttestationSubject) {
		t.Fatalf("error %v, want ErrAttestationSubject", err)
	}
	if !strings.Contains(err.Error(), a.DigestStr()) || !strings.Contains(err.Error(), "not "+b.DigestStr()) {
		t.Errorf("error %q does not name both digests", err)
	}
}

func TestVerifyWithoutAttestation(t *testing.T) {
	repo := newRepository(t)
	s := newKey(t)
	ref := artifact(t, repo, "a: 1\n")
	sign(t, s, ref)
	if err := VerifySignature(ref, s); err != nil {
		t.Errorf("VerifySignature: %v", err)
	}
	if _, err := Verify(ref, s); !errors.Is(err, ErrNoAttestation) {
		t.Errorf("Verify: error %v, want ErrNoAttestation", err)
	}
}

// A registry that cannot be read is not an unsigned artifact.
func TestVerifyRegistryErrorIsNotAVerdict(t *testing.T) {
	ref, err := name.NewDigest("127.0.0.1:1/fleet/app@sha256:"+strings.Repeat("0", 64), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Verify(ref, newKey(t), remote.WithRetryBackoff(remote.Backoff{Steps: 1}))
	if err == nil || errors.Is(err, ErrUnsigned) || errors.Is(err, ErrBadSignature) {
		t.Errorf("error %v, want a registry error", err)
	}
}

// A registry serving a huge signature layer gets an error, not a read of it into memory.
func TestVerifyRefusesAnOversizedSignatureLayer(t *testing.T) {
	repo := newRepository(t)
	ref := artifact(t, repo, "a: 1\n")
	img, err := cosignImage(static.NewLayer(make([]byte, maxBlob+1), SimpleSigningMediaType),
		map[string]string{AnnotationSignature: ""})
	if err != nil {
		t.Fatal(err)
	}
	push(t, img, repo, SignatureTag(ociartifacttest.Hash(t, ref)))
	err = VerifySignature(ref, newKey(t))
	if err == nil || !strings.Contains(err.Error(), "more than") || errors.Is(err, ErrBadSignature) {
		t.Errorf("error %v, want the size refused", err)
	}
}
