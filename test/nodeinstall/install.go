// Package nodeinstall installs Flux and this controller on a cluster the way users do, with
// kubectl: Flux from Flux's own manifests (flux2's manifests/install, as `flux install --export`
// renders them) with kustomize-controller's ExternalArtifact gate patched in exactly as the
// README tells users to, and this controller with `kubectl apply -k config/default` plus an image
// override. The test suite test/node and `make demo-node` share it.
package nodeinstall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxassets"
)

// Flux2Version is the flux2 module whose manifests/ are Flux's installation: the same layout
// `flux install` builds its manifests from.
const Flux2Version = "v2.9.5"

// Installer runs kubectl against one cluster.
type Installer struct {
	Kubectl    string // kubectl binary
	Kubeconfig string
	RepoRoot   string // this repository: config/, README.md
	WorkDir    string // where the kustomizations are assembled
	Logf       func(format string, args ...any)
	// KeepEventsAddr installs this controller with config/'s --events-addr although Flux installs
	// no notification-controller: to measure what an events address nothing answers costs.
	KeepEventsAddr bool
	// Lockdown installs kustomize-controller and this controller locked down for tenants
	// (tenancy.go).
	Lockdown bool
	// ControllerArgs are added to this controller's arguments by the overlay, as a platform team
	// adds its own flags (for example the networks its registries are on).
	ControllerArgs []string

	fluxSystem string    // flux bootstrap's flux-system directory Flux() applied
	platform   *Platform // set by Bootstrap: the controller is installed by commits from then on
}

// Versions are the Flux controllers to install; they must match the images loaded on the node.
type Versions struct {
	SourceController    string // e.g. v1.9.6
	KustomizeController string // e.g. v1.9.5
	// ImageReflectorController (e.g. v1.2.4) is installed too when set: ImageRepositories and
	// ImagePolicies, which KCLArtifacts read with argumentsFrom.
	ImageReflectorController string
}

// controllers are the Flux controllers of v, by name, with their versions.
func (v Versions) controllers() map[string]string {
	c := map[string]string{"source-controller": v.SourceController, "kustomize-controller": v.KustomizeController}
	if v.ImageReflectorController != "" {
		c["image-reflector-controller"] = v.ImageReflectorController
	}
	return c
}

// deployments are the Deployments of v's controllers in flux-system, sorted.
func (v Versions) deployments() []string {
	var d []string
	for name := range v.controllers() {
		d = append(d, name)
	}
	slices.Sort(d)
	return d
}

// Run runs kubectl with the installer's kubeconfig and returns its combined output.
func (i *Installer) Run(ctx context.Context, args ...string) (string, error) {
	return i.kubectl(ctx, nil, args...)
}

// Apply applies YAML documents with server-side apply.
func (i *Installer) Apply(ctx context.Context, yaml string) (string, error) {
	return i.kubectl(ctx, []byte(yaml), "apply", "--server-side", "-f", "-")
}

func (i *Installer) kubectl(ctx context.Context, stdin []byte, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, i.Kubectl, append([]string{"--kubeconfig", i.Kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, tail(out.String(), 30))
	}
	return out.String(), nil
}

// Flux installs source-controller and kustomize-controller (and image-reflector-controller when
// v names it) into flux-system from Flux's own manifests, as a flux bootstrap repository holds
// them (gotk-components.yaml plus the README's kustomization.yaml with its patches), and waits
// until their Deployments are Available.
func (i *Installer) Flux(ctx context.Context, v Versions) error {
	manifests, err := moduleDir(ctx, "github.com/fluxcd/flux2/v2@"+Flux2Version)
	if err != nil {
		return err
	}
	dir := filepath.Join(i.WorkDir, "flux")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := copyDir(filepath.Join(manifests, "manifests"), filepath.Join(dir, "manifests")); err != nil {
		return err
	}
	for name, version := range v.controllers() {
		base := filepath.Join(dir, "manifests", "bases", name)
		if err := i.localRelease(ctx, base, name, version); err != nil {
			return err
		}
		if err := withoutEventsAddr(base); err != nil {
			return err
		}
	}
	if err := keepControllers(filepath.Join(dir, "manifests", "install", "kustomization.yaml"), v.deployments()); err != nil {
		return err
	}
	components, err := i.kubectl(ctx, nil, "kustomize", filepath.Join(dir, "manifests", "install"))
	if err != nil {
		return err
	}
	repo := filepath.Join(dir, "clusters", "my-cluster", "flux-system")
	if err := i.writeBootstrapRepo(repo, components); err != nil {
		return err
	}
	i.fluxSystem = repo
	i.Logf("nodeinstall: kubectl apply -k %s (Flux %s: %v)", repo, Flux2Version, v.controllers())
	if _, err := i.kubectl(ctx, nil, "apply", "--server-side", "-k", repo); err != nil {
		return err
	}
	return i.waitAvailable(ctx, "flux-system", v.deployments()...)
}

// localRelease builds a controller's release assets from its Go module, as its release does,
// and points flux2's base at them instead of the download.
func (i *Installer) localRelease(ctx context.Context, base, name, version string) error {
	mod, err := moduleDir(ctx, "github.com/fluxcd/"+name+"@"+version)
	if err != nil {
		return err
	}
	return fluxassets.Write(base, name, mod, func(dir string) ([]byte, error) {
		out, err := i.kubectl(ctx, nil, "kustomize", dir)
		return []byte(out), err
	})
}

// replaceInFile replaces every match of re in file; that nothing matched is an error (flux2's
// layout is not what this installer knows).
func replaceInFile(file string, re *regexp.Regexp, repl, what string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	replaced := re.ReplaceAllString(string(data), repl)
	if replaced == string(data) {
		return fmt.Errorf("%s: no %s to replace", file, what)
	}
	return os.WriteFile(file, []byte(replaced), 0o644)
}

// eventsAddr is the argument of flux2's bases that points a controller at notification-controller.
var eventsAddr = regexp.MustCompile(`--events-addr=\S+`)

// withoutEventsAddr empties a base's --events-addr, as `flux install --components` does when
// notification-controller is not among them: the controllers then record events without posting
// them, instead of retrying a Service that does not exist on every event. ControllerFrom does the
// same to this controller's Deployment.
func withoutEventsAddr(base string) error {
	return replaceInFile(filepath.Join(base, "patch.yaml"), eventsAddr, "--events-addr=", "--events-addr")
}

// keepControllers leaves, of flux2's install, the namespace, RBAC, network policies and the
// controllers named (the others are not built here). flux2's RBAC already binds its controller
// role to every controller's account, image-reflector-controller's included.
func keepControllers(kfile string, controllers []string) error {
	data, err := os.ReadFile(kfile)
	if err != nil {
		return err
	}
	var kept []string
	for _, line := range strings.Split(string(data), "\n") {
		base, isBase := strings.CutPrefix(strings.TrimSpace(line), "- ../bases/")
		if isBase && !slices.Contains(controllers, base) {
			continue
		}
		kept = append(kept, line)
	}
	return os.WriteFile(kfile, []byte(strings.Join(kept, "\n")), 0o644)
}

// writeBootstrapRepo lays out flux bootstrap's directory: gotk-components.yaml and the
// kustomization.yaml of the README (without gotk-sync.yaml: there is no bootstrap repository).
func (i *Installer) writeBootstrapRepo(dir, components string) error {
	kustomization, err := READMEBootstrapKustomization(filepath.Join(i.RepoRoot, "README.md"))
	if err != nil {
		return err
	}
	kustomization = strings.ReplaceAll(kustomization, "  - gotk-sync.yaml\n", "")
	if i.Lockdown {
		if kustomization, err = LockDownBootstrapKustomization(kustomization); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "gotk-components.yaml"), []byte(components), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o644)
}

// READMEBootstrapKustomization is the README's example of flux bootstrap's kustomization.yaml
// with the ExternalArtifact patch: the YAML block that starts with its file-name comment.
func READMEBootstrapKustomization(readme string) (string, error) {
	data, err := os.ReadFile(readme)
	if err != nil {
		return "", err
	}
	const marker = "# clusters/my-cluster/flux-system/kustomization.yaml"
	text := string(data)
	start := strings.Index(text, marker)
	if start < 0 {
		return "", fmt.Errorf("%s: no block starting with %q", readme, marker)
	}
	end := strings.Index(text[start:], "```")
	if end < 0 {
		return "", fmt.Errorf("%s: the block %q is not closed", readme, marker)
	}
	block := text[start : start+end]
	if !strings.Contains(block, "--feature-gates=ExternalArtifact=true") {
		return "", fmt.Errorf("%s: the bootstrap kustomization no longer enables ExternalArtifact", readme)
	}
	return block, nil
}

// ControllerImageName is the image config/manager names (and tags with the release).
const ControllerImageName = "ghcr.io/kcl-flux/kcl-artifact-controller"

// Controller installs this controller with `kubectl apply -k` of an overlay that is
// config/default plus an image override, and waits until it is Available.
func (i *Installer) Controller(ctx context.Context, image string) error {
	return i.ControllerFrom(ctx, "config/default", image)
}

// ControllerFrom installs this controller from base, a kustomization of this repository
// (config/default, config/persistent-storage), plus an image override, and waits until the
// Deployment has rolled out. Before Bootstrap it applies with `kubectl apply --server-side -k`;
// after, it commits to the platform repository and Flux applies. Applied over an install from
// another base, it changes what differs (the storage volume) and the Deployment replaces its Pod.
func (i *Installer) ControllerFrom(ctx context.Context, base, image string) error {
	events := ", --events-addr emptied (no notification-controller)"
	if i.KeepEventsAddr {
		events = ", --events-addr kept although no notification-controller answers"
	}
	config := filepath.Join(i.RepoRoot, "config")
	if i.platform != nil {
		_, err := i.commitController(ctx, config, base, image, "kcl-artifact-controller: "+base+events)
		return err
	}
	dir := filepath.Join(i.WorkDir, "kcl-artifact-controller")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := i.writeControllerOverlay(dir, config, base, image); err != nil {
		return err
	}
	i.Logf("nodeinstall: kubectl apply -k %s with image %s%s", base, image, events)
	if _, err := i.kubectl(ctx, nil, "apply", "--server-side", "-k", dir); err != nil {
		return err
	}
	return i.waitAvailable(ctx, "kcl-system", "kcl-artifact-controller")
}

// writeControllerOverlay writes into dir a copy of configDir (some release's config/) and an
// overlay of base with the image. The copy's --events-addr is emptied, as for Flux's
// controllers, since Flux installs no notification-controller here, unless KeepEventsAddr.
func (i *Installer) writeControllerOverlay(dir, configDir, base, image string) error {
	name, tag, ok := strings.Cut(image, ":")
	if !ok {
		return fmt.Errorf("image %q has no tag", image)
	}
	if !strings.HasPrefix(base, "config/") {
		return fmt.Errorf("base %q is not a directory of config/", base)
	}
	if err := copyDir(configDir, filepath.Join(dir, "config")); err != nil {
		return err
	}
	if !i.KeepEventsAddr {
		deployment := filepath.Join(dir, "config", "manager", "deployment.yaml")
		if err := replaceInFile(deployment, eventsAddr, "--events-addr=", "--events-addr"); err != nil {
			return err
		}
	}
	overlay := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
images:
  - name: %s
    newName: %s
    newTag: %s
`, base, ControllerImageName, name, tag)
	if i.Lockdown || len(i.ControllerArgs) > 0 {
		overlay += "patches:\n"
	}
	if i.Lockdown {
		overlay += ControllerLockdownPatch
	}
	if len(i.ControllerArgs) > 0 {
		overlay += controllerArgsPatch(i.ControllerArgs)
	}
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644)
}

// controllerArgsPatch is a patch of the overlay adding args to the controller's container.
func controllerArgsPatch(args []string) string {
	var b strings.Builder
	b.WriteString("  - patch: |\n")
	for _, a := range args {
		fmt.Fprintf(&b, "      - op: add\n        path: /spec/template/spec/containers/0/args/-\n        value: %s\n", a)
	}
	b.WriteString("    target:\n      kind: Deployment\n      name: kcl-artifact-controller\n")
	return b.String()
}

// waitAvailable waits for Deployments to be Available; on a timeout the error shows their Pods.
func (i *Installer) waitAvailable(ctx context.Context, ns string, deployments ...string) error {
	for _, d := range deployments {
		if _, err := i.kubectl(ctx, nil, "-n", ns, "rollout", "status", "deployment/"+d, "--timeout=5m"); err != nil {
			pods, _ := i.kubectl(ctx, nil, "-n", ns, "get", "pods", "-o", "wide")
			events, _ := i.kubectl(ctx, nil, "-n", ns, "get", "events", "--sort-by=.lastTimestamp")
			return fmt.Errorf("%w\npods:\n%s\nevents:\n%s", err, pods, tail(events, 20))
		}
	}
	return nil
}

// moduleDir downloads a Go module into the module cache (the Go module proxy, pinned version)
// and returns its directory.
func moduleDir(ctx context.Context, modVersion string) (string, error) {
	tmp, err := os.MkdirTemp("", "nodeinstall-mod-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte("module download\n\ngo 1.24\n"), 0o644); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", modVersion)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	var m struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &m); jerr != nil || m.Error != "" || err != nil {
		return "", fmt.Errorf("go mod download %s: %v %s", modVersion, errors.Join(err, jerr), m.Error)
	}
	return m.Dir, nil
}

// copyDir copies a tree of regular files, writable (the module cache is read-only).
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// BuiltFluxVersions are the controller versions `make testbin` built for the default Flux line
// (bin/crds/.pins: "source-controller@v1.9.6 kustomize-controller@v1.9.5
// image-reflector-controller@v1.2.4"; the last is absent from a bin/ built before it), whose
// images `make image` makes.
func BuiltFluxVersions(repoRoot string) (Versions, error) {
	file := filepath.Join(repoRoot, "bin", "crds", ".pins")
	data, err := os.ReadFile(file)
	if err != nil {
		return Versions{}, fmt.Errorf("%w (run `make testbin`)", err)
	}
	var v Versions
	for _, f := range strings.Fields(string(data)) {
		name, version, _ := strings.Cut(f, "@")
		switch name {
		case "source-controller":
			v.SourceController = version
		case "kustomize-controller":
			v.KustomizeController = version
		case "image-reflector-controller":
			v.ImageReflectorController = version
		}
	}
	if v.SourceController == "" || v.KustomizeController == "" {
		return Versions{}, fmt.Errorf("%s: no controller versions in %q", file, data)
	}
	return v, nil
}
