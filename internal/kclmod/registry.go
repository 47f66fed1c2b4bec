package kclmod

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry reaches OCI registries for a tenant's request other than a dependency: pushing a
// rendered artifact. It goes through the same guard as dependency fetches (the address checks,
// allowed hosts and networks, the transfer bounds, no proxy from the environment) and sends the
// tenant's docker config, matched as the kubelet matches image pull secrets. Only
// Options' network fields are read.
type Registry struct {
	net *netGuard
	kc  *keychain
}

// NewRegistry returns a Registry sending the credentials of dockerConfig (a docker config
// file, empty for none).
func NewRegistry(o Options, dockerConfig []byte) (*Registry, error) {
	guard, err := guardOf(o)
	if err != nil {
		return nil, err
	}
	kc, err := parseDockerConfig(dockerConfig)
	if err != nil {
		return nil, err
	}
	return &Registry{net: guard, kc: kc}, nil
}

// Call is one exchange with the registry of repo: the options of its requests, and how its
// failures are explained (the guard's refusal, a broken bound, the HTTP status; never the
// server's words). A host that is not allowed is refused before anything is sent.
func (g *Registry) Call(ctx context.Context, repo name.Repository) ([]remote.Option, func(doing string, err error) error, error) {
	registry := repo.RegistryStr()
	if !g.net.policy.hostAllowed(registry) {
		return nil, nil, fmt.Errorf("%w: %s is not one of the allowed hosts", ErrHostNotAllowed, registry)
	}
	ctx, cg := g.net.withCall(ctx)
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(g.kc),
		remote.WithUserAgent("kcl-artifact-controller"), remote.WithTransport(g.net.rt)}
	fail := func(doing string, err error) error {
		return registryError(registry, repo.String(), g.kc, cg, doing, err)
	}
	return opts, fail, nil
}
