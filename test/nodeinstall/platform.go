package nodeinstall

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// GitServer is where a platform repository lives (test/fluxenv's GitServer).
type GitServer interface {
	CreateRepo(name, dir string) (string, error)
	Commit(name, message string, change func(worktree string) error) (string, error)
	URL(name string) string
}

// Platform is a platform team's repository, laid out as fluxcd/flux2-multi-tenancy lays it out,
// that Flux applies to the cluster it runs in:
//
//	clusters/node/flux-system/               flux bootstrap's: gotk-components, gotk-sync, patches
//	clusters/node/kcl-flux-system/           config/flux-system: NetworkPolicies in Flux's namespace
//	clusters/node/infrastructure.yaml        a Flux Kustomization per controller added to Flux
//	infrastructure/kcl-artifact-controller/  this controller: its config/ vendored at a release,
//	                                         and an overlay of config/default with an image override
//
// Once Bootstrap has run, the Installer's ControllerFrom commits here instead of applying with
// kubectl, so every later change of the controller's install is a Git commit Flux applies.
type Platform struct {
	Git  GitServer
	Repo string // name of the repository on Git
	// Interval of the infrastructure Kustomization: long, so that a test that changes the
	// Deployment by hand (a replaced Pod) is not raced by drift correction; commits are applied
	// at once because kustomize-controller watches its source's revision.
	Interval time.Duration
}

const (
	platformCluster = "clusters/node"
	// PlatformKustomization is the Flux Kustomization that applies this controller.
	PlatformKustomization = "kcl-artifact-controller"
	platformControllerDir = "infrastructure/kcl-artifact-controller"
)

// Bootstrap does what `flux bootstrap git` does after Flux() installed the components: it pushes
// the platform repository (flux-system plus this controller from configDir, a config/ directory
// of some release, with image) and applies gotk-sync.yaml, so that Flux manages itself and this
// controller from then on. It returns once the controller is rolled out.
func (i *Installer) Bootstrap(ctx context.Context, p *Platform, configDir, base, image string) error {
	dir := filepath.Join(i.WorkDir, "platform")
	if err := i.writePlatform(dir, p, configDir, base, image); err != nil {
		return err
	}
	sha, err := p.Git.CreateRepo(p.Repo, dir)
	if err != nil {
		return err
	}
	// flux bootstrap's last step: the flux-system directory applied with its sync, patches included
	fluxSystem := filepath.Join(dir, platformCluster, "flux-system")
	i.Logf("nodeinstall: platform repository %s at %s; kubectl apply -k %s", p.Repo, sha[:12], fluxSystem)
	if _, err := i.kubectl(ctx, nil, "apply", "--server-side", "-k", fluxSystem); err != nil {
		return err
	}
	i.platform = p
	return i.waitPlatformApplied(ctx, sha)
}

// writePlatform lays the platform repository out in dir.
func (i *Installer) writePlatform(dir string, p *Platform, configDir, base, image string) error {
	if i.fluxSystem == "" {
		return fmt.Errorf("bootstrap: Flux() has not installed Flux's components")
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	fluxSystem := filepath.Join(dir, platformCluster, "flux-system")
	if err := copyDir(i.fluxSystem, fluxSystem); err != nil {
		return err
	}
	files := map[string]string{
		filepath.Join(platformCluster, "flux-system", "gotk-sync.yaml"): p.syncManifest(),
		filepath.Join(platformCluster, "infrastructure.yaml"):           p.infrastructureManifest(),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	if err := withSync(filepath.Join(fluxSystem, "kustomization.yaml")); err != nil {
		return err
	}
	// this tree's policies for Flux's namespace, applied with flux-system: the previous release's
	// config/flux-system lacked the one that lets the controller fetch sources where Flux's
	// policies are enforced, so a platform team kept its own copy there
	if err := copyDir(filepath.Join(i.RepoRoot, "config", "flux-system"), filepath.Join(dir, platformCluster, "kcl-flux-system")); err != nil {
		return err
	}
	return i.writeControllerOverlay(filepath.Join(dir, platformControllerDir), configDir, base, image)
}

// Platform is the platform repository Bootstrap pushed (nil before).
func (i *Installer) Platform() *Platform { return i.platform }

// commitController replaces the controller's directory of the platform repository (config/ from
// configDir, overlay of base with image) in one commit, asks Flux to fetch it as `flux reconcile
// source git` does, and waits until Flux applied it and the Deployment rolled out.
func (i *Installer) commitController(ctx context.Context, configDir, base, image, message string) (string, error) {
	p := i.platform
	sha, err := p.Git.Commit(p.Repo, message, func(work string) error {
		dir := filepath.Join(work, platformControllerDir)
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		return i.writeControllerOverlay(dir, configDir, base, image)
	})
	if err != nil {
		return "", err
	}
	i.Logf("nodeinstall: platform commit %s: %s", sha[:12], message)
	if err := i.RequestReconcile(ctx, "flux-system", "gitrepository/flux-system"); err != nil {
		return sha, err
	}
	return sha, i.waitPlatformApplied(ctx, sha)
}

// UpgradeController commits configDir (a release's config/) and image to the platform
// repository and waits until Flux applied them and the controller rolled out.
func (i *Installer) UpgradeController(ctx context.Context, configDir, image string) (string, error) {
	if i.platform == nil {
		return "", fmt.Errorf("upgrade: no platform repository (Bootstrap first)")
	}
	return i.commitController(ctx, configDir, "config/default", image, "kcl-artifact-controller: "+image)
}

// RequestReconcile sets reconcile.fluxcd.io/requestedAt on a Flux object, as `flux reconcile` does.
func (i *Installer) RequestReconcile(ctx context.Context, ns, object string) error {
	_, err := i.kubectl(ctx, nil, "-n", ns, "annotate", "--overwrite", object,
		"reconcile.fluxcd.io/requestedAt="+time.Now().Format(time.RFC3339Nano))
	return err
}

// waitPlatformApplied waits until the controller's Kustomization applied commit sha (its health
// checks passed: wait is set) and the Deployment is rolled out. The Kustomization may not exist
// yet: flux-system creates it from the commit.
func (i *Installer) waitPlatformApplied(ctx context.Context, sha string) error {
	revision := "main@sha1:" + sha
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		applied, _ := i.kubectl(ctx, nil, "-n", "flux-system", "get", "kustomization/"+PlatformKustomization,
			"-o", "jsonpath={.status.lastAppliedRevision}", "--ignore-not-found")
		if applied == revision {
			return i.waitAvailable(ctx, "kcl-system", "kcl-artifact-controller")
		}
		select {
		case <-ctx.Done():
			status, _ := i.kubectl(context.Background(), nil, "-n", "flux-system", "get", "kustomizations,gitrepositories", "-o", "wide")
			return fmt.Errorf("Flux did not apply %s to %s within 5m:\n%s", revision, PlatformKustomization, status)
		case <-time.After(time.Second):
		}
	}
}

// syncManifest is flux bootstrap's gotk-sync.yaml for the platform repository.
func (p *Platform) syncManifest() string {
	return fmt.Sprintf(`apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata:
  name: flux-system
  namespace: flux-system
spec:
  interval: 1m0s
  ref:
    branch: main
  url: %s
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: flux-system
  namespace: flux-system
spec:
  interval: 10m0s
  path: ./%s
  prune: true
  sourceRef:
    kind: GitRepository
    name: flux-system
`, p.Git.URL(p.Repo), platformCluster)
}

// infrastructureManifest is the Flux Kustomization that installs this controller, the way a
// platform repository adds a controller: the CRD and the Deployment in one apply (kustomize-
// controller applies CustomResourceDefinitions and Namespaces before the rest), health-checked.
func (p *Platform) infrastructureManifest() string {
	interval := p.Interval
	if interval == 0 {
		interval = time.Hour
	}
	return fmt.Sprintf(`apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: %s
  namespace: flux-system
spec:
  interval: %s
  retryInterval: 30s
  timeout: 5m
  path: ./%s
  prune: true
  wait: true
  serviceAccountName: kustomize-controller
  sourceRef:
    kind: GitRepository
    name: flux-system
`, PlatformKustomization, interval, platformControllerDir)
}

// withSync adds gotk-sync.yaml back to the bootstrap kustomization (writeBootstrapRepo leaves it
// out for the kubectl install, which has no repository to sync from).
func withSync(kfile string) error {
	data, err := os.ReadFile(kfile)
	if err != nil {
		return err
	}
	text := string(data)
	if strings.Contains(text, "gotk-sync.yaml") {
		return nil
	}
	const components = "  - gotk-components.yaml\n"
	if !strings.Contains(text, components) {
		return fmt.Errorf("%s: no %q to add gotk-sync.yaml after", kfile, strings.TrimSpace(components))
	}
	return os.WriteFile(kfile, []byte(strings.Replace(text, components, components+"  - gotk-sync.yaml\n", 1)), 0o644)
}
