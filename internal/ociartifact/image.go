package ociartifact

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Flux's OCI artifact format (fluxcd/pkg/oci globals.go, constants.go).
const (
	// ConfigMediaType is the config blob's media type of a Flux artifact.
	ConfigMediaType types.MediaType = "application/vnd.cncf.flux.config.v1+json"
	// ContentMediaType is the media type of its one layer, a gzip tarball.
	ContentMediaType types.MediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"

	AnnotationCreated  = "org.opencontainers.image.created"
	AnnotationSource   = "org.opencontainers.image.source"
	AnnotationRevision = "org.opencontainers.image.revision"

	// Created is the created annotation and config time of every image: the epoch, as
	// `flux push artifact --reproducible` writes it, so that a digest depends on content only.
	Created = "1970-01-01T00:00:00Z"
)

// ErrNotGzip is returned by Image for a file that is not a gzip stream.
var ErrNotGzip = errors.New("not a gzip file")

// Meta is what the manifest annotations say about an artifact. Source and Revision are
// required, as `flux push artifact` requires them. Everything here is part of the manifest
// digest: a revision that names the source commit gives the same output two digests, so the
// artifact revision (<ref>@sha256:<artifact digest>) is the one to use, and the commit goes into
// the provenance attestation.
type Meta struct {
	Source, Revision string
	// Annotations are added to the manifest's; they may not set created, source or revision.
	Annotations map[string]string
}

// annotations are the manifest annotations of m.
func (m Meta) annotations() (map[string]string, error) {
	if m.Source == "" || m.Revision == "" {
		return nil, errors.New("artifact meta: source and revision are required")
	}
	out := map[string]string{AnnotationCreated: Created, AnnotationSource: m.Source, AnnotationRevision: m.Revision}
	for k, v := range m.Annotations {
		if _, ok := out[k]; ok || k == "" {
			return nil, fmt.Errorf("artifact meta: annotation %q cannot be set", k)
		}
		out[k] = v
	}
	return out, nil
}

// Image is the Flux artifact image of the tarball at tgzPath, its one layer the file unchanged:
// the layer digest is the sha256 of the file (checked here), and the config's diff_id the
// digest of the uncompressed tar, as `flux push` records it. The file is read again when the
// image is written; if it changed meanwhile the registry refuses the blob (its digest no longer
// matches the manifest).
func Image(tgzPath string, m Meta) (v1.Image, error) {
	ann, err := m.annotations()
	if err != nil {
		return nil, err
	}
	want, err := fileDigest(tgzPath)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return os.Open(tgzPath) },
		tarball.WithMediaType(ContentMediaType))
	if err != nil {
		return nil, fmt.Errorf("artifact layer: %w", err)
	}
	got, err := layer.Digest()
	if err != nil {
		return nil, fmt.Errorf("artifact layer: %w", err)
	}
	if got != want {
		return nil, fmt.Errorf("artifact layer of %s has digest %v, not the file's %v", tgzPath, got, want)
	}
	return artifactImage(layer, ann)
}

// artifactImage assembles the image as fluxcd/pkg/oci Push does.
func artifactImage(layer v1.Layer, ann map[string]string) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, ConfigMediaType)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	img = mutate.Annotations(img, ann).(v1.Image)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer})
	if err != nil {
		return nil, err
	}
	// The digest reads the whole layer (and the uncompressed tar for the diff_id): a broken
	// gzip stream fails here rather than in the push.
	if _, err := img.Digest(); err != nil {
		return nil, fmt.Errorf("artifact image: %w", err)
	}
	return img, nil
}

// fileDigest is the sha256 of the file, which must be a gzip stream: tarball.LayerFromOpener
// would compress anything else itself, and the layer would no longer be the file.
func fileDigest(path string) (v1.Hash, error) {
	f, err := os.Open(path)
	if err != nil {
		return v1.Hash{}, err
	}
	defer f.Close()
	magic := make([]byte, 2)
	if _, err := io.ReadFull(f, magic); err != nil || !bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		return v1.Hash{}, fmt.Errorf("artifact %s: %w", path, ErrNotGzip)
	}
	h, _, err := v1.SHA256(io.MultiReader(bytes.NewReader(magic), f))
	return h, err
}
