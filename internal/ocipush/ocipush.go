// Package ocipush copies rendered artifacts to OCI registries, signed, where a hostile
// registry can only fail its own tenant's push. The controller builds everything that is pushed
// (the Flux artifact image of the stored tarball, its cosign signature and provenance
// attestation: internal/ociartifact) and writes it to an OCI image layout in a staging
// directory; a child process (internal/childproc: this binary re-executed, under a memory
// ceiling and a deadline, confined to reading that layout) sends it through the network guard
// dependency fetches use (internal/kclmod), with the tenant's registry credentials and nothing
// else. The signing key never leaves the controller: the child gets signatures, not the key.
package ocipush

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/kcl-flux/kcl-artifact-controller/internal/childproc"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact"
)

// Defaults of Options.
const (
	DefaultMemoryLimit = 256 << 20
	DefaultTimeout     = 2 * time.Minute
	DefaultSize        = 2
)

// Options configure a Pusher.
type Options struct {
	// Network is the network guard of pushes: its allowed hosts and networks, denied networks,
	// proxy and speed bounds (the other fields of kclmod.Options are not read). The controller
	// gives the dependency fetches' own: one rule for every connection a tenant asks for.
	Network kclmod.Options
	// StagingDir holds the layouts handed to push processes, one directory per push, removed
	// after it.
	StagingDir string
	// Limits bound the push processes (and the pulls that fetch artifacts back).
	childproc.Limits
}

func (o Options) withDefaults() (Options, error) {
	if o.Network.Transport != nil {
		return o, errors.New("ocipush: a push process cannot be given a Transport")
	}
	if o.StagingDir == "" {
		return o, errors.New("ocipush: a staging directory is required")
	}
	var err error
	o.Limits, err = o.Limits.WithDefaults(Subcommand, childproc.Limits{MemoryLimit: DefaultMemoryLimit,
		Timeout: DefaultTimeout, Size: DefaultSize})
	return o, err
}

// Pusher pushes artifacts. It is safe for concurrent use.
type Pusher struct {
	o     Options
	slots *fairshare.Limiter

	pushes, failures atomic.Int64
}

// New returns a Pusher.
func New(o Options) (*Pusher, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.StagingDir, 0o700); err != nil {
		return nil, fmt.Errorf("ocipush: staging directory: %w", err)
	}
	return &Pusher{o: o, slots: fairshare.NewLimiter(o.Size, o.PerDomain)}, nil
}

// Stats counts push processes: started, and failed (any cause).
func (p *Pusher) Stats() (started, failed int64) { return p.pushes.Load(), p.failures.Load() }

// Request is one artifact to push.
type Request struct {
	// Domain is the trust domain (the namespace): it bounds how many pushes run for it at once.
	Domain string
	// Repository is where to push, host[:port]/path (an oci:// URL's rest), without a tag.
	Repository string
	// Insecure reaches the registry over plain HTTP.
	Insecure bool
	// Artifact is the stored tarball, Meta its annotations.
	Artifact string
	Meta     ociartifact.Meta
	// ArtifactDigest is the tarball's digest, "sha256:<hex>": it names the digest tag.
	ArtifactDigest string
	// Tag is moved to the artifact once it, its signature and its attestation are pushed.
	Tag string
	// Signer signs the artifact, nil for none; Provenance then gives the in-toto statement of
	// the artifact image's manifest digest, attested beside the signature.
	Signer     signature.Signer
	Provenance func(manifest v1.Hash) ([]byte, error)
	// DockerConfig holds the tenant's registry credentials (a docker config file), for this
	// push only.
	DockerConfig []byte
}

// Result is what was pushed.
type Result struct {
	// Repository is where, Digest the artifact image's manifest digest.
	Repository, Digest string
	// Tags are the artifact's tags: the digest tag, then the moving tag.
	Tags []string
	// Signed: its signature and provenance attestation were pushed.
	Signed bool
	// Bytes is the size of what was staged for the registry (manifests, configs, layers).
	Bytes int64
}

// Push builds what req pushes and has a push process send it. A registry that refuses it, a
// host the guard does not allow, a process killed at its deadline or over its memory: an
// *Error, with a Reason.
func (p *Pusher) Push(ctx context.Context, req Request) (*Result, error) {
	repo, err := repository(req)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalid, Detail: err.Error()}
	}
	dir, err := os.MkdirTemp(p.o.StagingDir, "push-")
	if err != nil {
		return nil, fmt.Errorf("staging the push: %w", err)
	}
	defer os.RemoveAll(dir)
	// the place first: staging copies the artifact, and only pushes that run may hold a copy
	ctx, release, err := p.acquire(ctx, req.Domain)
	if err != nil {
		return nil, err
	}
	defer release()
	st, err := stage(dir, repo, req)
	if err != nil {
		return nil, err
	}
	p.pushes.Add(1)
	if err := p.run(ctx, req, repo, dir, st.pushes); err != nil {
		p.failures.Add(1)
		return nil, err
	}
	return &Result{Repository: repo.Name(), Digest: st.digest.String(), Tags: st.tags,
		Signed: req.Signer != nil, Bytes: st.bytes}, nil
}

// acquire waits for a place for domain and returns the context of its exchange (the timeout
// counts the wait) and its release.
func (p *Pusher) acquire(ctx context.Context, domain string) (context.Context, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, p.o.Timeout)
	release, err := p.slots.Acquire(ctx, domain)
	if err != nil {
		cancel()
		return nil, nil, &Error{Reason: ReasonTimeout, Detail: fmt.Sprintf(
			"waited %s for a push slot (%d in all, %d per namespace)", p.o.Timeout, p.o.Size, p.o.PerDomain)}
	}
	return ctx, func() { release(); cancel() }, nil
}

// repository is req's repository; a tag or digest in it is refused (name's rules).
func repository(req Request) (name.Repository, error) {
	opts := []name.Option{name.StrictValidation}
	if req.Insecure {
		opts = append(opts, name.Insecure)
	}
	repo, err := name.NewRepository(req.Repository, opts...)
	if err != nil {
		return name.Repository{}, fmt.Errorf("invalid repository %q (host[:port]/path, no tag or digest): %v", req.Repository, err)
	}
	return repo, nil
}
