package ociartifact

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// onlyLayer checks the cosign image frame (OCI manifest, OCI config, one layer of media type mt)
// and returns the layer's descriptor and bytes.
func onlyLayer(t *testing.T, img v1.Image, mt types.MediaType) (v1.Descriptor, []byte) {
	t.Helper()
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("manifest %s, config %s", m.MediaType, m.Config.MediaType)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != mt {
		t.Fatalf("layers %+v, want one %s", m.Layers, mt)
	}
	l, err := img.LayerByDigest(m.Layers[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return m.Layers[0], b
}

func TestSignatureImageLayout(t *testing.T) {
	s := newKey(t)
	ref := artifact(t, newRepository(t), "a: 1\n")
	img, err := SignatureImage(s, ref)
	if err != nil {
		t.Fatal(err)
	}
	d, p := onlyLayer(t, img, SimpleSigningMediaType)
	var c struct {
		Critical struct {
			Identity struct {
				DockerReference string `json:"docker-reference"`
			} `json:"identity"`
			Image struct {
				DockerManifestDigest string `json:"docker-manifest-digest"`
			} `json:"image"`
			Type string `json:"type"`
		} `json:"critical"`
	}
	if err := json.Unmarshal(p, &c); err != nil {
		t.Fatal(err)
	}
	if c.Critical.Identity.DockerReference != ref.Context().Name() ||
		c.Critical.Image.DockerManifestDigest != ref.DigestStr() || c.Critical.Type != "cosign container image signature" {
		t.Errorf("payload %s does not claim %s", p, ref)
	}
	sig, err := base64.StdEncoding.DecodeString(d.Annotations["dev.cosignproject.cosign/signature"])
	if err != nil {
		t.Fatal(err)
	}
	if err := s.VerifySignature(bytes.NewReader(sig), bytes.NewReader(p)); err != nil {
		t.Errorf("the signature annotation does not verify the payload: %v", err)
	}
}

func TestAttestationImageLayout(t *testing.T) {
	s := newKey(t)
	ref := artifact(t, newRepository(t), "a: 1\n")
	st := statementAbout(t, ref.Context().Name(), ref.DigestStr())
	img, err := AttestationImage(s, st)
	if err != nil {
		t.Fatal(err)
	}
	d, envJSON := onlyLayer(t, img, "application/vnd.dsse.envelope.v1+json")
	sig, ok := d.Annotations["dev.cosignproject.cosign/signature"]
	if !ok || sig != "" || d.Annotations["predicateType"] != "https://slsa.dev/provenance/v1" {
		t.Errorf("layer annotations %v, want predicateType and an empty signature", d.Annotations)
	}
	var env struct {
		PayloadType string `json:"payloadType"`
		Payload     string `json:"payload"`
		Signatures  []struct {
			Sig string `json:"sig"`
		} `json:"signatures"`
	}
	if err := json.Unmarshal(envJSON, &env); err != nil {
		t.Fatal(err)
	}
	payload, _ := base64.StdEncoding.DecodeString(env.Payload)
	if env.PayloadType != "application/vnd.in-toto+json" || !bytes.Equal(payload, st) || len(env.Signatures) != 1 {
		t.Errorf("envelope %s, want one signature of the statement as %s", envJSON, "application/vnd.in-toto+json")
	}
	if _, err := AttestationImage(s, []byte(`{"_type":"https://in-toto.io/Statement/v1"}`)); err == nil {
		t.Error("a statement without predicateType was signed")
	}
}
