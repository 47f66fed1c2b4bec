// Package node runs the product on a real node: kubelet, containerd and runc start the Pods of
// Flux's controllers and of this controller, installed the way users install them, and the
// workloads the rendered KCL programs deploy. Flux is installed from its own manifests with the
// README's ExternalArtifact patch, as `flux bootstrap` does; this controller by Flux itself, from
// a platform repository on the suite's Git server (test/nodeinstall Platform): first at the
// previous release, which runs a fleet of KCLArtifacts, then upgraded to this tree's image by one
// commit (TestUpgradeByFlux checks what the upgrade changed). Every later change to the
// controller's install is a commit Flux applies.
//
// It needs root and the binaries of `make testbin nodebin image previous-release`. Under CI=true
// it fails when the node cannot start, saying why; elsewhere it skips with the reason.
package node

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	imagev1 "github.com/fluxcd/image-reflector-controller/api/v1"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
	"github.com/kcl-flux/kcl-artifact-controller/test/kubenode"
	"github.com/kcl-flux/kcl-artifact-controller/test/nodeinstall"
)

const (
	waitTimeout = 4 * time.Minute
	// ControllerImage is what `make image` tags this controller's image (VERSION=dev).
	controllerImage = "ghcr.io/kcl-flux/kcl-artifact-controller:dev"
	controllerNS    = "kcl-system"
)

var suite struct {
	node    *kubenode.Node
	client  client.Client
	install *nodeinstall.Installer
	git     *fluxenv.GitServer
	repo    string
	figures []string // timings reported at the end of the run
	upgrade *upgradeRun
}

func TestMain(m *testing.M) {
	flag.Parse() // setUp reads -run: see upgradeWanted
	os.Exit(runMain(m))
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
}

// figure records a measured duration for the summary the suite prints.
func figure(name string, d time.Duration) {
	suite.figures = append(suite.figures, fmt.Sprintf("%-45s %s", name, d.Round(100*time.Millisecond)))
	logf("node: figure: %s: %s", name, d.Round(100*time.Millisecond))
}

// figureCount records a counted figure (renders, samples) for the summary the suite prints.
func figureCount(name string, n int) {
	suite.figures = append(suite.figures, fmt.Sprintf("%-45s %d", name, n))
	logf("node: figure: %s: %d", name, n)
}

func runMain(m *testing.M) int {
	if reason := cannotRun(); reason != "" {
		if os.Getenv("CI") == "true" {
			logf("node: FATAL: the node cannot start: %s", reason)
			return 1
		}
		logf("node: SKIP: %s (under CI=true this fails)", reason)
		return 0
	}
	ctx := context.Background()
	stop, err := setUp(ctx)
	if err != nil {
		logf("node: FATAL: %v", err)
		if stop != nil {
			stop()
		}
		return 1
	}
	code := m.Run()
	logf("node: figures:\n  %s", strings.Join(suite.figures, "\n  "))
	if code != 0 {
		logf("node: diagnostics:\n%s", diagnostics())
	}
	stop()
	return code
}

// cannotRun says why this machine cannot run a node ("" when it can).
func cannotRun() string {
	if os.Geteuid() != 0 {
		return "a node needs root"
	}
	if _, err := kubenode.LoadBin(); err != nil {
		return err.Error()
	}
	root, err := fluxenv.RepoRoot()
	if err != nil {
		return err.Error()
	}
	if tars, _ := filepath.Glob(filepath.Join(root, "bin", "images", "*.tar")); len(tars) == 0 {
		return "no images in bin/images (run `make image`)"
	}
	return ""
}

func setUp(ctx context.Context) (func(), error) {
	root, err := fluxenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	suite.repo = root
	began := time.Now()
	node, err := kubenode.Start(ctx, kubenode.Options{Name: "test", Logf: logf})
	if err != nil {
		return nil, fmt.Errorf("starting the node: %w", err)
	}
	suite.node = node
	figure("node start", node.Started)
	stop := func() {
		if suite.git != nil {
			_ = suite.git.Close()
		}
		if err := node.Stop(); err != nil {
			logf("node: stopping the node: %v", err)
		}
	}
	if err := loadImages(ctx, root); err != nil {
		return stop, err
	}
	if suite.client, err = newClient(); err != nil {
		return stop, err
	}
	// the Git server holds the platform repository Flux installs the controller from
	ln, err := node.Listen("tcp", kubenode.NodeIP+":0")
	if err != nil {
		return stop, err
	}
	gitDir := filepath.Join(node.DataDir, "git")
	suite.git, err = fluxenv.ServeGit(ln, filepath.Join(gitDir, "repos"), filepath.Join(gitDir, "work"),
		filepath.Join(node.LogDir, "git.log"))
	if err != nil {
		return stop, err
	}
	if err := install(ctx, root); err != nil {
		return stop, err
	}
	figure("node start to controller Pod Ready", time.Since(began))
	return stop, nil
}

// loadImages imports every image `make image` wrote into the node's containerd.
func loadImages(ctx context.Context, root string) error {
	tars, _ := filepath.Glob(filepath.Join(root, "bin", "images", "*.tar"))
	if configDir, _, err := previousRelease(root); err == nil {
		previous, _ := filepath.Glob(filepath.Join(filepath.Dir(configDir), "images", "*.tar"))
		tars = append(tars, previous...)
	}
	began := time.Now()
	for _, tar := range tars {
		if err := suite.node.ImportImage(ctx, tar); err != nil {
			return err
		}
	}
	figure("image import", time.Since(began))
	return nil
}

func install(ctx context.Context, root string) error {
	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		kubectl = filepath.Join(root, "bin", "node", "kubectl")
	}
	suite.install = &nodeinstall.Installer{Kubectl: kubectl, Kubeconfig: suite.node.KubeconfigPath,
		RepoRoot: root, WorkDir: filepath.Join(suite.node.DataDir, "install"), Logf: logf,
		// multi-tenancy locked down as Flux documents it (nodeinstall/tenancy.go)
		Lockdown: true,
		// the suite's registry is on the node's address, a private one the network guard denies
		// by default: allowed as a platform team allows its in-cluster registry (signed_test.go)
		ControllerArgs: []string{"--kcl-deps-allowed-networks=" + kubenode.NodeIP + "/32"}}
	versions, err := nodeinstall.BuiltFluxVersions(root)
	if err != nil {
		return err
	}
	began := time.Now()
	if err := suite.install.Flux(ctx, versions); err != nil {
		return fmt.Errorf("installing Flux: %w", err)
	}
	figure("Flux install to Available", time.Since(began))
	began = time.Now()
	if err := installByFlux(ctx, root); err != nil {
		return fmt.Errorf("installing the controller by Flux: %w", err)
	}
	figure("controller install by Flux to Available", time.Since(began))
	return nil
}

func newClient() (client.Client, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, sourcev1.AddToScheme,
		kustomizev1.AddToScheme, kclv1.AddToScheme, imagev1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	cfg := rest.CopyConfig(suite.node.Config)
	cfg.WarningHandlerWithContext = warningLog{}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// warningLog prints the API server's warnings (an unknown field pruned) in the suite's log
// instead of controller-runtime's, which has no logger here.
type warningLog struct{}

func (warningLog) HandleWarningHeaderWithContext(_ context.Context, code int, _, text string) {
	if code == 299 {
		logf("node: API server warning: %s", text)
	}
}

// diagnostics is what a failed run shows: every Pod, and the controllers' log tails.
func diagnostics() string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var b strings.Builder
	out, _ := suite.install.Run(ctx, "get", "pods,deployments,kustomizations,kclartifacts,externalartifacts,gitrepositories", "-A", "-o", "wide")
	b.WriteString(out)
	// apart: without image-reflector-controller's CRDs the line above would fail as a whole
	out, _ = suite.install.Run(ctx, "get", "imagerepositories,imagepolicies", "-A", "-o", "wide")
	b.WriteString(out)
	for _, d := range []string{"kcl-system/deployment/kcl-artifact-controller", "flux-system/deployment/kustomize-controller",
		"flux-system/deployment/source-controller", "flux-system/deployment/image-reflector-controller"} {
		parts := strings.SplitN(d, "/", 2)
		out, _ := suite.install.Run(ctx, "-n", parts[0], "logs", parts[1], "--tail=30")
		fmt.Fprintf(&b, "---- %s\n%s\n", d, out)
	}
	return b.String()
}
