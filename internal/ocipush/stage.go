package ocipush

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact"
)

// push is one image of the layout and the tags it gets, in the order they are written: the
// artifact under its digest tag, its signature and attestation, and last the moving tag, so
// that a spoke following it never sees an artifact whose signature is not there yet.
type push struct {
	Digest string   `json:"digest"`
	Tags   []string `json:"tags"`
}

// staged is what stage wrote.
type staged struct {
	digest v1.Hash
	tags   []string
	pushes []push
	bytes  int64
}

// stage builds the images of req and writes them to an OCI image layout in dir.
func stage(dir string, repo name.Repository, req Request) (*staged, error) {
	img, err := ociartifact.Image(req.Artifact, req.Meta)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalid, Detail: fmt.Sprintf("building the artifact image: %v", err)}
	}
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	digestTag, err := ociartifact.DigestTag(req.ArtifactDigest)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalid, Detail: err.Error()}
	}
	st := &staged{digest: d, tags: []string{digestTag}}
	images := []v1.Image{img}
	st.pushes = []push{{Digest: d.String(), Tags: []string{digestTag}}}
	if req.Signer != nil {
		signed, err := signatures(repo.Digest(d.String()), d, req)
		if err != nil {
			return nil, err
		}
		for _, s := range signed {
			images = append(images, s.img)
			sd, err := s.img.Digest()
			if err != nil {
				return nil, err
			}
			st.pushes = append(st.pushes, push{Digest: sd.String(), Tags: []string{s.tag}})
		}
	}
	if req.Tag != "" && req.Tag != digestTag {
		st.tags = append(st.tags, req.Tag)
		st.pushes = append(st.pushes, push{Digest: d.String(), Tags: []string{req.Tag}})
	}
	if st.bytes, err = writeLayout(dir, images); err != nil {
		return nil, fmt.Errorf("staging the push: %w", err)
	}
	return st, nil
}

type signedImage struct {
	img v1.Image
	tag string
}

// signatures are the cosign signature and provenance attestation images of ref.
func signatures(ref name.Digest, d v1.Hash, req Request) ([]signedImage, error) {
	sig, err := ociartifact.SignatureImage(req.Signer, ref)
	if err != nil {
		return nil, &Error{Reason: ReasonSign, Detail: fmt.Sprintf("signing: %v", err)}
	}
	out := []signedImage{{sig, ociartifact.SignatureTag(d)}}
	if req.Provenance == nil {
		return out, nil
	}
	statement, err := req.Provenance(d)
	if err != nil {
		return nil, &Error{Reason: ReasonSign, Detail: fmt.Sprintf("writing the provenance: %v", err)}
	}
	att, err := ociartifact.AttestationImage(req.Signer, statement)
	if err != nil {
		return nil, &Error{Reason: ReasonSign, Detail: fmt.Sprintf("signing the provenance: %v", err)}
	}
	return append(out, signedImage{att, ociartifact.AttestationTag(d)}), nil
}

// writeLayout writes images to an OCI image layout in dir and returns the bytes of their
// manifests, configs and layers.
func writeLayout(dir string, images []v1.Image) (int64, error) {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, img := range images {
		if err := p.AppendImage(img); err != nil {
			return 0, err
		}
		size, err := imageBytes(img)
		if err != nil {
			return 0, err
		}
		n += size
	}
	return n, nil
}

func imageBytes(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}
