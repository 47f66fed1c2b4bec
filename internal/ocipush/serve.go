package ocipush

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/signal"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/kcl-flux/kcl-artifact-controller/internal/childproc"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
)

// Subcommand is the hidden command of this binary that runs one push.
const Subcommand = "__kcl-oci-push"

// processName is how a push process names itself in the line it writes when it cannot start.
const processName = "push process"

// ServeIfPusher runs the push and exits when this process was started as a push process. main
// (and TestMain of packages that push) calls it first.
func ServeIfPusher() { childproc.ServeIf(Subcommand, processName, serve) }

// Main is a push process's entry point; it returns its exit code.
func Main(args []string) int { return childproc.Main(Subcommand, processName, args, serve) }

func serve(b []byte) any {
	var req wireRequest
	if err := json.Unmarshal(b, &req); err != nil {
		return wireResult{Error: fmt.Sprintf("reading the request: %v", err)}
	}
	statement, err := send(req)
	if err != nil {
		return wireResult{Error: err.Error(), HostNotAllowed: errors.Is(err, kclmod.ErrHostNotAllowed), Refused: errors.Is(err, errRefused)}
	}
	return wireResult{Statement: statement}
}

// send writes the layout's images to the repository, in order, each under its tags; or, for a
// pull, fetches the verified artifact back and returns its provenance statement.
func send(req wireRequest) ([]byte, error) {
	// the parent's deadline kills the process anyway; a signal lets it end cleanly
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	repo, opts, fail, err := exchange(ctx, req)
	if err != nil {
		return nil, err
	}
	switch {
	case req.Pull != nil:
		return fetchLayer(repo, req.Pull, opts, fail)
	case req.Retag != nil:
		return nil, moveTag(repo, req.Retag, opts, fail)
	}
	p, err := layout.FromPath(req.Layout)
	if err != nil {
		return nil, fmt.Errorf("reading the staged push: %w", err)
	}
	for _, ps := range req.Pushes {
		if err := sendOne(p, repo, ps, opts, fail); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// exchange is the repository of req and the guarded options of its requests.
func exchange(ctx context.Context, req wireRequest) (name.Repository, []remote.Option, func(string, error) error, error) {
	var err error
	if req.Network.Proxy, err = kclmod.ParseProxy(req.Proxy); err != nil {
		return name.Repository{}, nil, nil, err
	}
	g, err := kclmod.NewRegistry(req.Network, req.DockerConfig)
	if err != nil {
		return name.Repository{}, nil, nil, err
	}
	var nopts []name.Option
	if req.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	repo, err := name.NewRepository(req.Repository, nopts...)
	if err != nil {
		return name.Repository{}, nil, nil, err
	}
	opts, fail, err := g.Call(ctx, repo)
	return repo, opts, fail, err
}

// sendOne writes one image under its first tag (blobs the registry has are not sent again)
// and adds its other tags.
func sendOne(p layout.Path, repo name.Repository, ps push, opts []remote.Option, fail func(string, error) error) error {
	h, err := v1.NewHash(ps.Digest)
	if err != nil {
		return err
	}
	img, err := p.Image(h)
	if err != nil {
		return fmt.Errorf("reading the staged image %s: %w", ps.Digest, err)
	}
	for i, t := range ps.Tags {
		ref := repo.Tag(t)
		if i == 0 {
			err = remote.Write(ref, img, opts...)
		} else {
			err = remote.Tag(ref, img, opts...)
		}
		if err != nil {
			return fail("pushing "+ref.String(), err)
		}
	}
	return nil
}

// moveTag points a tag at a manifest the repository holds (fetched by its digest, so that
// the registry cannot substitute another).
func moveTag(repo name.Repository, rt *retag, opts []remote.Option, fail func(string, error) error) error {
	ref := repo.Digest(rt.Manifest)
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return fail("fetching "+ref.String(), err)
	}
	if err := remote.Tag(repo.Tag(rt.Tag), desc, opts...); err != nil {
		return fail("tagging "+ref.String(), err)
	}
	return nil
}
