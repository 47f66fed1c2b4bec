package ociartifact

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Bounds of what Verify reads from a registry it does not trust.
const (
	// maxLayers is cosign's own bound on the layers of a signature image.
	maxLayers = 1000
	// maxBlob bounds one signature payload or DSSE envelope; a provenance statement of this
	// project is some kilobytes.
	maxBlob = 4 << 20
	// maxBlobs bounds the layers of one image read together (they are held until checked).
	maxBlobs = 16 << 20
)

// errAbsent is a tag the registry does not have.
var errAbsent = errors.New("not in the registry")

// blob is one layer of a cosign image: its bytes and its manifest annotations.
type blob struct {
	data []byte
	ann  map[string]string
}

// cosignLayers reads the layers of media type mt of the image at tag, each within maxBlob;
// errAbsent when the tag does not exist.
func cosignLayers(tag name.Tag, mt types.MediaType, opts []remote.Option) ([]blob, error) {
	img, err := remote.Image(tag, opts...)
	if err != nil {
		var te *transport.Error
		if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
			return nil, errAbsent
		}
		return nil, fmt.Errorf("reading %s: %w", tag, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", tag, err)
	}
	if len(m.Layers) > maxLayers {
		return nil, fmt.Errorf("%s has %d layers, more than %d", tag, len(m.Layers), maxLayers)
	}
	var out []blob
	var total int64
	for _, d := range m.Layers {
		if d.MediaType != mt {
			continue
		}
		if total += d.Size; total > maxBlobs {
			return nil, fmt.Errorf("%s: its %s layers are more than %d bytes", tag, mt, maxBlobs)
		}
		data, err := readLayer(img, d)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", tag, err)
		}
		out = append(out, blob{data: data, ann: d.Annotations})
	}
	return out, nil
}

// readLayer reads one layer within maxBlob; go-containerregistry checks its digest at the end.
func readLayer(img v1.Image, d v1.Descriptor) ([]byte, error) {
	if d.Size < 0 || d.Size > maxBlob {
		return nil, fmt.Errorf("layer %s of %d bytes, more than %d", d.Digest, d.Size, maxBlob)
	}
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxBlob+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != d.Size {
		return nil, fmt.Errorf("layer %s: %d bytes, the manifest says %d", d.Digest, len(data), d.Size)
	}
	return data, nil
}
