package nodeimage

import (
	"debug/buildinfo"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
)

// The images, by the name the CLI and the output files use.
const (
	Controller          = "kcl-artifact-controller"
	SourceController    = "source-controller"
	KustomizeController = "kustomize-controller"
	// ImageReflectorController is Flux's image-reflector-controller (ImageRepository, ImagePolicy)
	ImageReflectorController = "image-reflector-controller"
	Pause                    = "pause"
	DemoApp                  = "demo-app"
)

// Targets are what the CLI accepts: an image name, or a group of them, in build order.
var Targets = map[string][]string{
	Controller:               {Controller},
	"controller":             {Controller},
	SourceController:         {SourceController},
	KustomizeController:      {KustomizeController},
	ImageReflectorController: {ImageReflectorController},
	"flux":                   {SourceController, KustomizeController, ImageReflectorController},
	Pause:                    {Pause},
	DemoApp:                  {DemoApp},
	"all":                    {Controller, SourceController, KustomizeController, ImageReflectorController, Pause, DemoApp},
}

// References of the images.
const (
	ControllerRepo = "ghcr.io/kcl-flux/kcl-artifact-controller" // tagged with the version
	PauseRef       = "registry.k8s.io/pause:3.10"               // what containerd 2.x and kubeadm expect
	DemoAppRef     = "ghcr.io/kcl-flux/demo-app:v1"
	sourceURL      = "https://github.com/kcl-flux/kcl-artifact-controller"
)

// ControllerDir and ControllerFiles: the Dockerfile's final stage copies these files of `make
// build build-plugin`'s bin/ into this directory (TestDockerfileAgrees holds the two to each
// other). PluginFile is the flux CLI plugin of the same version, static, for copying out of the
// image (it is never run there); releases older than the plugin ship without it. WorkerFile is the
// KCL worker alone (cmd/kcl-worker), which the controller starts from beside itself; releases
// older than it ship without it, and their controller runs its own binary as the worker.
const (
	ControllerDir = "/usr/local/bin"
	PluginFile    = "flux-kcl"
	WorkerFile    = "kcl-worker"
)

var ControllerFiles = []string{"kcl-artifact-controller", WorkerFile, "libkcl.so", "libnapistub.so", PluginFile}

// WithoutPlugin is ControllerFiles without the plugin: the image of a release that predates it
// (the node suite's previous release).
func WithoutPlugin() []string { return Without(PluginFile) }

// Without is ControllerFiles without the named files: the image of a release that predates
// them (the node suite's previous release predates the worker binary, and may predate the
// plugin).
func Without(files ...string) []string {
	return slices.DeleteFunc(slices.Clone(ControllerFiles), func(f string) bool { return slices.Contains(files, f) })
}

// fluxImage is what Flux's own Dockerfile of a controller sets: its binary in /usr/local/bin, run
// by name, as nobody. Flux's Deployments pass only args, so they work unchanged. (kustomize-
// controller's upstream entrypoint is `/sbin/tini -- kustomize-controller`; there is no tini
// here, and it only reaps the gpg/git children that Flux's SOPS decryption may start.)
type fluxImage struct {
	repo, version string // version: when the binary's build info does not name its module
	env           []string
}

var fluxImages = map[string]fluxImage{
	SourceController:    {repo: "ghcr.io/fluxcd/source-controller", version: "v1.9.6"},
	KustomizeController: {repo: "ghcr.io/fluxcd/kustomize-controller", version: "v1.9.5", env: []string{"GNUPGHOME=/tmp"}},
	// upstream's image is alpine with the binary alone; its Deployment mounts /tmp and /data
	ImageReflectorController: {repo: "ghcr.io/fluxcd/image-reflector-controller", version: "v1.2.4"},
}

// basePath is the PATH of debian:bookworm's image config; the Flux images need it to find their
// entrypoint by name.
const basePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Inputs are where the images' files come from.
type Inputs struct {
	RepoRoot                 string   // the module root (test/nodeimage/demoapp)
	BinDir                   string   // `make build`'s output
	ControllerFiles          []string // of BinDir, into the controller image; nil: ControllerFiles
	Version                  string   // the controller image's tag
	SourceController         string   // binaries from `make testbin`
	KustomizeController      string
	ImageReflectorController string
	WorkDir                  string // where pause and demo-app are compiled
}

// Specs returns the specs of the named images. Every host input is checked before anything is
// built, so a missing one fails at once (a MissingInputError naming its make target).
func Specs(names []string, in Inputs) ([]Spec, error) {
	base := sync.OnceValues(DebianBase)
	var specs []Spec
	for _, n := range names {
		s, err := specFor(n, in, base)
		if err != nil {
			return nil, err
		}
		specs = append(specs, s)
	}
	return specs, nil
}

func specFor(name string, in Inputs, base func() (*Base, error)) (Spec, error) {
	if name == Pause {
		bin, err := BuildPause(in.WorkDir)
		if err != nil {
			return Spec{}, err
		}
		return PauseSpec(bin)
	}
	b, err := base()
	if err != nil {
		return Spec{}, err
	}
	switch name {
	case Controller:
		files := in.ControllerFiles
		if files == nil {
			files = ControllerFiles
		}
		return ControllerSpec(b, in.BinDir, in.Version, files)
	case SourceController:
		return FluxSpec(b, name, in.SourceController)
	case KustomizeController:
		return FluxSpec(b, name, in.KustomizeController)
	case ImageReflectorController:
		return FluxSpec(b, name, in.ImageReflectorController)
	case DemoApp:
		bin, err := BuildDemoApp(in.RepoRoot, in.WorkDir)
		if err != nil {
			return Spec{}, err
		}
		return DemoAppSpec(b, bin)
	}
	return Spec{}, fmt.Errorf("no image %q", name)
}

// ControllerSpec is the Dockerfile's final stage: the files of binDir (ControllerFiles, or an
// older release's Without) in /usr/local/bin, user 65532, `kcl-artifact-controller run`.
func ControllerSpec(base *Base, binDir, version string, names []string) (Spec, error) {
	var files []Entry
	for _, f := range names {
		e, err := HostFile(path.Join(ControllerDir, f), filepath.Join(binDir, f), "make build build-plugin")
		if err != nil {
			return Spec{}, err
		}
		files = append(files, e)
	}
	return onBase(base, Controller, ControllerRepo+":"+version, files, Config{
		User:       "65532:65532",
		Entrypoint: []string{path.Join(ControllerDir, Controller)},
		Cmd:        []string{"run"},
		Labels:     versionLabels(version, sourceURL),
	}), nil
}

// FluxSpec is Flux's image of controller name (source-, kustomize- or image-reflector-controller) with
// the given binary, tagged with the version the binary was built from.
func FluxSpec(base *Base, name, binary string) (Spec, error) {
	f, ok := fluxImages[name]
	if !ok {
		return Spec{}, fmt.Errorf("no Flux image %q", name)
	}
	e, err := HostFile("/usr/local/bin/"+name, binary, "make testbin")
	if err != nil {
		return Spec{}, err
	}
	version := moduleVersion(binary, "github.com/fluxcd/"+name, f.version)
	return onBase(base, name, f.repo+":"+version, []Entry{e}, Config{
		User:       "65534:65534",
		Entrypoint: []string{name},
		Env:        f.env,
		Labels:     versionLabels(version, "https://github.com/fluxcd/"+name),
	}), nil
}

// moduleVersion is the version of module in the binary's build info (hack/testbin.sh builds Flux
// from a throwaway module that requires it), or fallback.
func moduleVersion(binary, module, fallback string) string {
	bi, err := buildinfo.ReadFile(binary)
	if err != nil {
		return fallback
	}
	mods := append([]*debug.Module{&bi.Main}, bi.Deps...)
	for _, m := range mods {
		if m.Path == module && strings.HasPrefix(m.Version, "v") {
			return m.Version
		}
	}
	return fallback
}

// PauseSpec is the pod sandbox image: our pause program alone, as Kubernetes' own pause image
// (user 65535, entrypoint /pause).
func PauseSpec(binary string) (Spec, error) {
	e, err := HostFile("/pause", binary, "nodeimage.BuildPause")
	if err != nil {
		return Spec{}, err
	}
	return Spec{
		Name:   Pause,
		Ref:    PauseRef,
		Layers: []Layer{{Name: Pause, Entries: []Entry{e}}},
		Config: Config{User: "65535:65535", Entrypoint: []string{"/pause"}, Labels: versionLabels("3.10", sourceURL)},
	}, nil
}

// DemoAppSpec is the demo workload (test/nodeimage/demoapp), run as nonroot.
func DemoAppSpec(base *Base, binary string) (Spec, error) {
	e, err := HostFile("/usr/local/bin/"+DemoApp, binary, "nodeimage.BuildDemoApp")
	if err != nil {
		return Spec{}, err
	}
	return onBase(base, DemoApp, DemoAppRef, []Entry{e}, Config{
		User:       "65532:65532",
		Entrypoint: []string{"/usr/local/bin/" + DemoApp},
		Labels:     versionLabels("v1", sourceURL),
	}), nil
}

// onBase puts files in a layer over the Debian base, with debian's PATH and the base's labels.
func onBase(base *Base, name, ref string, files []Entry, c Config) Spec {
	c.Env = append([]string{basePath}, c.Env...)
	labels := base.Labels()
	maps.Copy(labels, c.Labels)
	c.Labels = labels
	return Spec{Name: name, Ref: ref, Layers: []Layer{base.Layer, {Name: name, Entries: files}}, Config: c}
}

func versionLabels(version, source string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.version": version,
		"org.opencontainers.image.source":  source,
	}
}
