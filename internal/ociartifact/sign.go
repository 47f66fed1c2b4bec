package ociartifact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/dsse"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// cosign's legacy layout (cosign v3.0.6 pkg/types/media.go, pkg/oci/static, pkg/oci/empty).
const (
	SimpleSigningMediaType types.MediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	DSSEMediaType          types.MediaType = "application/vnd.dsse.envelope.v1+json"
	// InTotoPayloadType is the DSSE payload type of an in-toto statement.
	InTotoPayloadType = "application/vnd.in-toto+json"

	// AnnotationSignature holds base64(signature) of a simple-signing layer. On a DSSE layer it
	// is empty (the signature is in the envelope) but must be there: cosign refuses the layer
	// without it.
	AnnotationSignature = "dev.cosignproject.cosign/signature"
	// AnnotationPredicateType names the predicate of an attestation layer's statement.
	AnnotationPredicateType = "predicateType"
)

// SignatureImage is the cosign signature image of ref's manifest, to push at
// ref.Context().Tag(SignatureTag(digest)): one simple-signing layer whose payload claims ref's
// repository and digest, signed with s. It holds this one signature: pushed, it replaces the
// signatures already at the tag (cosign sign would append).
func SignatureImage(s signature.Signer, ref name.Digest) (v1.Image, error) {
	if _, err := v1.NewHash(ref.DigestStr()); err != nil {
		return nil, fmt.Errorf("signature of %s: %w", ref, err)
	}
	p, err := payload.Cosign{Image: ref}.MarshalJSON()
	if err != nil {
		return nil, err
	}
	sig, err := s.SignMessage(bytes.NewReader(p))
	if err != nil {
		return nil, fmt.Errorf("signing %s: %w", ref, err)
	}
	return cosignImage(static.NewLayer(p, SimpleSigningMediaType),
		map[string]string{AnnotationSignature: base64.StdEncoding.EncodeToString(sig)})
}

// AttestationImage is the cosign attestation image of an in-toto statement, to push at
// AttestationTag of the statement's subject digest: one layer holding a DSSE envelope of the
// statement signed with s. The statement is signed as given (provenance.Statement makes one);
// only its predicateType is read, for the layer annotation.
func AttestationImage(s signature.Signer, statement []byte) (v1.Image, error) {
	var st struct {
		PredicateType string `json:"predicateType"`
	}
	if err := json.Unmarshal(statement, &st); err != nil {
		return nil, fmt.Errorf("attestation statement: %w", err)
	}
	if st.PredicateType == "" {
		return nil, errors.New("attestation statement: no predicateType")
	}
	env, err := dsse.WrapSigner(s, InTotoPayloadType).SignMessage(bytes.NewReader(statement))
	if err != nil {
		return nil, fmt.Errorf("signing attestation: %w", err)
	}
	return cosignImage(static.NewLayer(env, DSSEMediaType),
		map[string]string{AnnotationPredicateType: st.PredicateType, AnnotationSignature: ""})
}

// cosignImage is cosign's signature image around one layer: an OCI manifest with the plain OCI
// config media type, as cosign's empty.Signatures() starts it.
func cosignImage(layer v1.Layer, ann map[string]string) (v1.Image, error) {
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.Append(base, mutate.Addendum{Layer: layer, Annotations: ann})
}
