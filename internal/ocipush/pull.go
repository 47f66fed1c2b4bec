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
	// PublicKey (PEM) must verify the artifact's cosign signature, with the claim naming this
	// manifest and repository, and its provenance attestation, before anything else is fetched.
	PublicKey []byte
}

// Pulled is an artifact fetched back: its layer in a file, and its verified provenance.
type Pulled struct {
	// File holds the layer; Remove removes it.
	File      string
	Statement []byte
	Remove    func()
}

// Pull fetches back the artifact layer (the tarball as it was stored) of req.Manifest, once its
// signature and provenance verify with req.PublicKey, through a push process as confined as a
// push. It checks the image is a Flux artifact of one layer; the caller checks the statement
// names what it expects and the file's digest is the one it recorded.
func (p *Pusher) Pull(ctx context.Context, req PullRequest) (*Pulled, error) {
	repo, err := repository(Request{Repository: req.Repository, Insecure: req.Insecure})
	if err != nil {
		return nil, &Error{Reason: ReasonInvalid, Detail: err.Error()}
	}
	if len(req.PublicKey) == 0 {
		return nil, &Error{Reason: ReasonInvalid, Detail: "a pull needs the public key the artifact was signed with"}
	}
	ctx, release, err := p.acquire(ctx, req.Domain)
	if err != nil {
		return nil, err
	}
	defer release()
	dir, err := os.MkdirTemp(p.o.StagingDir, "pull-")
	if err != nil {
		return nil, fmt.Errorf("staging the pull: %w", err)
	}
	remove := func() { os.RemoveAll(dir) }
	out := filepath.Join(dir, "artifact.tar.gz")
	w := wireRequest{DockerConfig: req.DockerConfig, Insecure: req.Insecure,
		Pull: &pull{Manifest: req.Manifest, Out: out, MaxBytes: req.MaxBytes, PublicKey: req.PublicKey}}
	res, err := p.call(ctx, w, repo, childproc.Config{Writes: []string{dir}})
	if err != nil {
		remove()
		return nil, err
	}
	return &Pulled{File: out, Statement: res.Statement, Remove: remove}, nil
}

// TagRequest moves a tag to an artifact the repository holds: a rollback or a pin to one
// pushed before, whose images are there already (pushed again, its signature would change).
type TagRequest struct {
	// Domain, Repository, Insecure and DockerConfig are as in Request.
	Domain, Repository string
	Insecure           bool
	DockerConfig       []byte
	// Manifest is the artifact image's manifest digest, Tag the tag to move to it.
	Manifest, Tag string
}

// Tag moves req.Tag to req.Manifest, from a push process.
func (p *Pusher) Tag(ctx context.Context, req TagRequest) error {
	repo, err := repository(Request{Repository: req.Repository, Insecure: req.Insecure})
	if err != nil {
		return &Error{Reason: ReasonInvalid, Detail: err.Error()}
	}
	ctx, release, err := p.acquire(ctx, req.Domain)
	if err != nil {
		return err
	}
	defer release()
	w := wireRequest{DockerConfig: req.DockerConfig, Insecure: req.Insecure, Retag: &retag{Manifest: req.Manifest, Tag: req.Tag}}
	_, err = p.call(ctx, w, repo, childproc.Config{})
	return err
}

// fetchLayer is the push process's side of Pull: the signature and provenance verified with the
// public key, then the manifest by digest (go-containerregistry checks it has that digest), its
// one Flux content layer, at most MaxBytes of it, read whole so that its digest is checked too.
func fetchLayer(repo name.Repository, pl *pull, opts []remote.Option, fail func(string, error) error) ([]byte, error) {
	ref := repo.Digest(pl.Manifest)
	v, err := ociartifact.LoadVerifier(pl.PublicKey)
	if err != nil {
		return nil, err
	}
	verified, err := ociartifact.Verify(ref, v, opts...)
	if err != nil {
		if verdict(err) {
			return nil, fmt.Errorf("%w: %w", errRefused, err)
		}
		return nil, err
	}
	return verified.Statement, writeLayer(ref, pl, opts, fail)
}

// errRefused marks a pull whose artifact did not verify.
var errRefused = errors.New("refused")

// verdict: err is the verifier's judgement of what the registry holds, not a failure to ask.
func verdict(err error) bool {
	for _, e := range []error{ociartifact.ErrUnsigned, ociartifact.ErrBadSignature, ociartifact.ErrReplayedSignature,
		ociartifact.ErrNoAttestation, ociartifact.ErrBadAttestation, ociartifact.ErrAttestationSubject} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// writeLayer writes the one Flux content layer of ref to pl.Out.
func writeLayer(ref name.Digest, pl *pull, opts []remote.Option, fail func(string, error) error) error {
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
		// the media type is the registry's words: not quoted
		return fmt.Errorf("%s is not a Flux artifact (its layer is not %s)", ref, ociartifact.ContentMediaType)
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
