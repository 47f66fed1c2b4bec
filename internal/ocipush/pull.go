package ocipush

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kcl-flux/kcl-artifact-controller/internal/childproc"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact"
)

// PullRequest is an artifact to fetch back from the repository it was pushed to.
type PullRequest struct {
	// Domain, Repository, Insecure and DockerConfig are as in Request.
	Domain, Repository string
	Insecure           bool
	DockerConfig       []byte
	// Manifest is the artifact image's manifest digest, "sha256:<hex>".
	Manifest string
	// MaxBytes bounds the layer fetched.
	MaxBytes int64
}

// Pull fetches the artifact layer (the tarball as it was stored) of req.Manifest into a file,
// through a push process as confined as a push, and returns the file and its removal. It
// checks the image is a Flux artifact of one layer; the caller checks the file's digest against
// what it recorded.
func (p *Pusher) Pull(ctx context.Context, req PullRequest) (string, func(), error) {
	repo, err := repository(Request{Repository: req.Repository, Insecure: req.Insecure})
	if err != nil {
		return "", nil, &Error{Reason: ReasonInvalid, Detail: err.Error()}
	}
	dir, err := os.MkdirTemp(p.o.StagingDir, "pull-")
	if err != nil {
		return "", nil, fmt.Errorf("staging the pull: %w", err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	ctx, release, err := p.acquire(ctx, req.Domain)
	if err != nil {
		cleanup()
		return "", nil, err
	}
	defer release()
	out := filepath.Join(dir, "artifact.tar.gz")
	w := wireRequest{DockerConfig: req.DockerConfig, Insecure: req.Insecure,
		Pull: &pull{Manifest: req.Manifest, Out: out, MaxBytes: req.MaxBytes}}
	if err := p.call(ctx, w, repo, childproc.Config{Writes: []string{dir}}); err != nil {
		cleanup()
		return "", nil, err
	}
	return out, cleanup, nil
}

// fetchLayer is the push process's side of Pull: the manifest by digest (go-containerregistry
// checks it has that digest), its one Flux content layer, at most MaxBytes of it, read whole so
// that its digest is checked too.
func fetchLayer(repo name.Repository, pl *pull, opts []remote.Option, fail func(string, error) error) error {
	ref := repo.Digest(pl.Manifest)
	img, err := remote.Image(ref, opts...)
	if err != nil {
		return fail("fetching "+ref.String(), err)
	}
	layers, err := img.Layers()
	if err != nil {
		return fail("fetching "+ref.String(), err)
	}
	if len(layers) != 1 {
		return fmt.Errorf("%s has %d layers, not the one of a Flux artifact", ref, len(layers))
	}
	if mt, err := layers[0].MediaType(); err != nil || mt != ociartifact.ContentMediaType {
		return fmt.Errorf("%s is not a Flux artifact (its layer is a %s)", ref, mt)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		return fail("fetching the layer of "+ref.String(), err)
	}
	defer rc.Close()
	f, err := os.OpenFile(pl.Out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(f, io.LimitReader(rc, pl.MaxBytes+1))
	if err != nil {
		return fail("fetching the layer of "+ref.String(), err)
	}
	if n > pl.MaxBytes {
		return fmt.Errorf("the layer of %s is larger than the %d bytes recorded", ref, pl.MaxBytes)
	}
	// the digest is checked at the end of the stream: read it
	if _, err := io.Copy(io.Discard, rc); err != nil && !errors.Is(err, io.EOF) {
		return fail("checking the layer of "+ref.String(), err)
	}
	return f.Close()
}
