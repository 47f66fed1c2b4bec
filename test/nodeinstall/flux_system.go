package nodeinstall

import (
	"context"
	"path/filepath"
)

// FluxSystemPolicies applies config/flux-system as users do (`kubectl apply -k
// config/flux-system`): NetworkPolicies in flux-system that admit this controller, next to Flux's
// own policies, to source-controller's artifacts and notification-controller's event receiver.
// Where a policy engine enforces Flux's policies, the controller fetches no source without it.
func (i *Installer) FluxSystemPolicies(ctx context.Context) error {
	dir := filepath.Join(i.RepoRoot, "config", "flux-system")
	i.Logf("nodeinstall: kubectl apply -k %s", dir)
	_, err := i.kubectl(ctx, nil, "apply", "-k", dir)
	return err
}
