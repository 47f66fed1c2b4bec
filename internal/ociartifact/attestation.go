package ociartifact

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/dsse"
)

// in-toto statement types: v1 is what provenance.Statement writes, v0.1 what older cosign
// attest wrote.
var statementTypes = map[string]bool{
	"https://in-toto.io/Statement/v1":   true,
	"https://in-toto.io/Statement/v0.1": true,
}

// statement is the part of an in-toto statement that Verify reads.
type statement struct {
	Type          string `json:"_type"`
	PredicateType string `json:"predicateType"`
	Subject       []struct {
		Name   string            `json:"name"`
		Digest map[string]string `json:"digest"`
	} `json:"subject"`
}

// VerifyAttestation checks that a DSSE layer of the image at the .att tag verifies with v and
// that its in-toto statement has ref's manifest digest among its subjects (the digest, as
// cosign's IntotoSubjectClaimVerifier: a subject's name is informative). It returns the first
// such statement, JSON as signed, and its predicate type.
func VerifyAttestation(ref name.Digest, v signature.Verifier, opts ...remote.Option) ([]byte, string, error) {
	h, err := manifestHash(ref)
	if err != nil {
		return nil, "", err
	}
	tag := ref.Context().Tag(AttestationTag(h))
	atts, err := cosignLayers(tag, DSSEMediaType, opts)
	if errors.Is(err, errAbsent) || err == nil && len(atts) == 0 {
		return nil, "", fmt.Errorf("%s: %w (none at %s)", ref, ErrNoAttestation, tag)
	}
	if err != nil {
		return nil, "", err
	}
	var other error
	for _, a := range atts {
		var p []byte
		dv := dsse.WrapVerifier(v, dsse.WithExpectedPayloadType(InTotoPayloadType), dsse.WithDecodedPayload(&p))
		if dv.VerifySignature(bytes.NewReader(a.data), nil) != nil {
			continue
		}
		pt, err := checkSubject(p, h.Hex, ref)
		if err != nil {
			other = err
			continue
		}
		return p, pt, nil
	}
	if other != nil {
		return nil, "", other
	}
	return nil, "", fmt.Errorf("%s: %w (%d attestation(s) at %s)", ref, ErrBadAttestation, len(atts), tag)
}

// checkSubject refuses a verified statement that is not about the digest; it returns the
// statement's predicate type.
func checkSubject(p []byte, hex string, ref name.Digest) (string, error) {
	var st statement
	if err := json.Unmarshal(p, &st); err != nil || !statementTypes[st.Type] {
		return "", fmt.Errorf("%s: %w: not an in-toto statement", ref, ErrAttestationSubject)
	}
	var named []string
	for _, s := range st.Subject {
		if s.Digest["sha256"] == hex {
			return st.PredicateType, nil
		}
		named = append(named, "sha256:"+s.Digest["sha256"])
	}
	return "", fmt.Errorf("%s: %w: the statement's subjects name %v, not %s", ref, ErrAttestationSubject, named, ref.DigestStr())
}
