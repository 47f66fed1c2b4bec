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
	if err := send(req); err != nil {
		return wireResult{Error: err.Error(), HostNotAllowed: errors.Is(err, kclmod.ErrHostNotAllowed)}
	}
	return wireResult{}
}

// send writes the layout's images to the repository, in order, each under its tags.
func send(req wireRequest) error {
	var err error
	if req.Network.Proxy, err = kclmod.ParseProxy(req.Proxy); err != nil {
		return err
	}
	g, err := kclmod.NewRegistry(req.Network, req.DockerConfig)
	if err != nil {
		return err
	}
	var nopts []name.Option
	if req.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	repo, err := name.NewRepository(req.Repository, nopts...)
	if err != nil {
		return err
	}
	var p layout.Path
	if req.Pull == nil {
		if p, err = layout.FromPath(req.Layout); err != nil {
			return fmt.Errorf("reading the staged push: %w", err)
		}
	}
	// the parent's deadline kills the process anyway; a signal lets it end cleanly
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	opts, fail, err := g.Call(ctx, repo)
	if err != nil {
		return err
	}
	if req.Pull != nil {
		return fetchLayer(repo, req.Pull, opts, fail)
	}
	for _, ps := range req.Pushes {
		if err := sendOne(p, repo, ps, opts, fail); err != nil {
			return err
		}
	}
	return nil
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
