// Package fluxenv starts and stops a real local Flux environment for tests and the dev cluster:
// an envtest control plane (real etcd and kube-apiserver on 127.0.0.1), the Flux CRDs (plus any
// extra CRD directories), source-controller and kustomize-controller as child processes (and, with
// Options.ImageReflector, image-reflector-controller), a Git server on 127.0.0.1 serving bare
// repositories over the smart HTTP protocol, an OCI registry and an S3 server. StartSpoke adds
// a second cluster (its own etcd and kube-apiserver) for hub-and-spoke Kustomizations;
// StartFluxSpoke one that also runs its own source-controller and kustomize-controller (the pull
// layout).
//
// The binaries come from bin/testbin.env, written by `make testbin` (hack/testbin.sh).
//
// Every process the Env starts is a child of the calling process with Pdeathsig SIGKILL, so a
// crashed test leaves nothing running; Env.Stop stops exactly those processes and reports any
// that survive.
package fluxenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	imagev1 "github.com/fluxcd/image-reflector-controller/api/v1"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options configure Start. The zero value is usable.
type Options struct {
	// WorkDir holds everything of the environment: kubeconfig, logs/, etcd data, the
	// source-controller storage, the Git repositories. Created if missing; Start first deletes
	// the subdirectories a previous run left (etcd, kube-apiserver, source-controller,
	// image-reflector-controller, git, bin, logs, spokes, prometheus). If empty, a temporary directory is used and removed by a successful Stop.
	WorkDir string
	// KubeconfigPath is where the admin kubeconfig is written; default WorkDir/kubeconfig.
	KubeconfigPath string
	// CRDDirs are CRD directories installed besides the Flux CRDs (e.g. config/crd/bases).
	// A missing directory is an error.
	CRDDirs []string
	// AddToScheme adds more types to the scheme of Env.Client (e.g. the project's API).
	AddToScheme []func(*runtime.Scheme) error
	// SourceControllerArgs and KustomizeControllerArgs are appended to the controllers' flags.
	SourceControllerArgs    []string
	KustomizeControllerArgs []string
	// ImageReflector also starts image-reflector-controller (TestBin.ImageReflectorController, its
	// CRDs from FluxCRDsDir), watching all namespaces, its tag database in
	// WorkDir/image-reflector-controller. It reaches Env.Registry at 127.0.0.1 over plain HTTP
	// when an ImageRepository says `insecure: true`.
	ImageReflector bool
	// ImageReflectorArgs are appended to image-reflector-controller's flags.
	ImageReflectorArgs []string
	// StartTimeout bounds the start of each component (etcd, kube-apiserver, each controller
	// becoming ready). Default 3 minutes: the machine may be slow.
	StartTimeout time.Duration
	// StopGrace is how long a process may take to exit after SIGTERM before SIGKILL. Default 20s.
	StopGrace time.Duration
	// TestBin overrides the binaries found by LoadTestBin.
	TestBin *TestBin
	// Logf, if set, receives progress messages.
	Logf func(format string, args ...any)
}

// Ports are the TCP ports of the environment, all on 127.0.0.1.
type Ports struct {
	APIServer        int `json:"apiServer"`
	Etcd             int `json:"etcd"`
	Git              int `json:"git"`
	Registry         int `json:"registry"`
	S3               int `json:"s3"`
	SourceStorage    int `json:"sourceStorage"`
	SourceMetrics    int `json:"sourceMetrics"`
	SourceHealth     int `json:"sourceHealth"`
	KustomizeMetrics int `json:"kustomizeMetrics"`
	KustomizeHealth  int `json:"kustomizeHealth"`
	// image-reflector-controller's, 0 when it is not started
	ImageReflectorMetrics int `json:"imageReflectorMetrics,omitempty"`
	ImageReflectorHealth  int `json:"imageReflectorHealth,omitempty"`
}

// Env is a running environment. Its fields must not be changed.
type Env struct {
	Config         *rest.Config    // admin access to the kube-apiserver
	Client         client.Client   // uses Scheme
	Scheme         *runtime.Scheme // client-go types, source-controller v1, kustomize-controller v1, image-reflector-controller v1, Options.AddToScheme
	KubeconfigPath string          // admin kubeconfig file
	Git            *GitServer      // Git server on 127.0.0.1
	Registry       *Registry       // OCI registry on 127.0.0.1, for OCIRepositories and ImageRepositories
	S3             *S3Server       // S3-compatible object store on 127.0.0.1, for Buckets
	WorkDir        string
	LogDir         string // logs of every process: etcd, kube-apiserver, controllers, git server
	StorageDir     string // source-controller --storage-path
	StorageAddr    string // source-controller artifact server, 127.0.0.1:<port>
	Ports          Ports
	TestBin        *TestBin

	SourceController    *Process
	KustomizeController *Process
	// ImageReflectorController is nil unless Options.ImageReflector.
	ImageReflectorController *Process

	kclMu          sync.Mutex
	kclControllers []*KCLController // started with StartKCLController, by parallel tests

	spokeMu sync.Mutex
	spokes  []*Spoke // started with StartSpoke

	promMu       sync.Mutex
	prometheuses []*Prometheus // started with StartPrometheus
	promStarted  int

	opts          Options
	testEnv       *envtest.Environment
	controlPlane  []PIDInfo // etcd and kube-apiserver, once found
	logFiles      []*os.File
	removeWorkDir bool

	stopOnce sync.Once
	stopErr  error
}

// Start starts the environment and returns when the control plane serves, the CRDs are
// established and both controllers report ready. On failure everything started is stopped and
// the error names the component that failed, with the tail of its log.
func Start(ctx context.Context, opts Options) (*Env, error) {
	opts = opts.withDefaults()
	tb := opts.TestBin
	if tb == nil {
		var err error
		if tb, err = LoadTestBin(); err != nil {
			return nil, err
		}
	}
	if opts.ImageReflector {
		if err := tb.CheckImageReflector(); err != nil {
			return nil, err
		}
	}
	e := &Env{opts: opts, TestBin: tb, WorkDir: opts.WorkDir}
	if err := e.prepareDirs(); err != nil {
		return nil, err
	}
	if err := e.buildScheme(); err != nil {
		return nil, err
	}
	started := time.Now()
	if err := e.startAll(ctx, started); err != nil {
		if stopErr := e.Stop(); stopErr != nil {
			err = fmt.Errorf("%w (stopping what was started: %v)", err, stopErr)
		}
		return nil, err
	}
	opts.Logf("fluxenv: ready in %s; git server %s, OCI registry %s, S3 %s, source-controller storage %s",
		time.Since(started).Round(time.Millisecond), e.Git.URLBase, e.Registry.Host, e.S3.Endpoint, e.StorageAddr)
	return e, nil
}

func (o Options) withDefaults() Options {
	if o.StartTimeout <= 0 {
		o.StartTimeout = 3 * time.Minute
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 20 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

// prepareDirs lays out the work directory. State of a previous run in the same work directory
// must not leak in (envtest would reuse old certificates, etcd old data).
func (e *Env) prepareDirs() error {
	if e.WorkDir == "" {
		dir, err := os.MkdirTemp("", "fluxenv-")
		if err != nil {
			return err
		}
		e.WorkDir, e.removeWorkDir = dir, true
	}
	var err error
	if e.WorkDir, err = filepath.Abs(e.WorkDir); err != nil {
		return err
	}
	e.LogDir = filepath.Join(e.WorkDir, "logs")
	e.StorageDir = filepath.Join(e.WorkDir, "source-controller", "storage")
	e.KubeconfigPath = e.opts.KubeconfigPath
	if e.KubeconfigPath == "" {
		e.KubeconfigPath = filepath.Join(e.WorkDir, "kubeconfig")
	}
	if e.KubeconfigPath, err = filepath.Abs(e.KubeconfigPath); err != nil {
		return err
	}
	for _, d := range []string{"etcd", "kube-apiserver", "source-controller", imageReflectorName, "git", "bin", "logs", "spokes", "prometheus"} {
		if err := os.RemoveAll(filepath.Join(e.WorkDir, d)); err != nil {
			return err
		}
	}
	for _, d := range []string{e.LogDir, e.StorageDir, filepath.Join(e.WorkDir, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}

func (e *Env) buildScheme() error {
	e.Scheme = runtime.NewScheme()
	adders := append([]func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, sourcev1.AddToScheme, kustomizev1.AddToScheme, imagev1.AddToScheme,
	}, e.opts.AddToScheme...)
	for _, add := range adders {
		if err := add(e.Scheme); err != nil {
			return fmt.Errorf("building scheme: %w", err)
		}
	}
	return nil
}

// startAll starts the control plane, the servers of sources and the Flux controllers, and waits
// until the controllers report ready.
func (e *Env) startAll(ctx context.Context, started time.Time) error {
	logf := e.opts.Logf
	logf("fluxenv: starting etcd and kube-apiserver (work dir %s)", e.WorkDir)
	if err := e.startControlPlane(); err != nil {
		return err
	}
	logf("fluxenv: control plane up at %s in %s", e.Config.Host, time.Since(started).Round(time.Millisecond))
	if err := os.WriteFile(e.KubeconfigPath, e.testEnv.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	var err error
	// the tests poll in parallel at 4/s each; client-go's default 5 QPS would throttle them
	// into each other's waits
	cfg := rest.CopyConfig(e.Config)
	cfg.QPS, cfg.Burst = 200, 400
	if e.Client, err = client.New(cfg, client.Options{Scheme: e.Scheme}); err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	e.Git, err = StartGitServer(filepath.Join(e.WorkDir, "git", "repos"), filepath.Join(e.WorkDir, "git", "work"),
		filepath.Join(e.LogDir, "git-server.log"))
	if err != nil {
		return fmt.Errorf("starting git server: %w", err)
	}
	e.Ports.Git = e.Git.Port
	if err := e.startObjectServers(); err != nil {
		return err
	}
	if err := e.startFluxControllers(); err != nil {
		return err
	}
	return e.waitFluxControllers(ctx)
}

// startFluxControllers starts source-controller and kustomize-controller on free ports (and
// image-reflector-controller when asked).
func (e *Env) startFluxControllers() error {
	f, err := startFlux(fluxSet{
		tb: e.TestBin, kubeconfig: e.KubeconfigPath, storageDir: e.StorageDir, logDir: e.LogDir,
		sourceArgs: e.opts.SourceControllerArgs, kustomizeArgs: e.opts.KustomizeControllerArgs,
	}, e.opts.StopGrace)
	if err != nil {
		return err
	}
	e.SourceController, e.KustomizeController, e.StorageAddr = f.source, f.kustomize, f.storageAddr
	e.Ports.SourceStorage, e.Ports.SourceMetrics, e.Ports.SourceHealth = f.ports[0], f.ports[1], f.ports[2]
	e.Ports.KustomizeMetrics, e.Ports.KustomizeHealth = f.ports[3], f.ports[4]
	if e.opts.ImageReflector {
		return e.startImageReflector(controllerEnv(e.KubeconfigPath))
	}
	return nil
}

// fluxSet is where a source-controller and kustomize-controller pair runs: the hub's, or a
// spoke's own (the pull layout).
type fluxSet struct {
	tb         *TestBin
	kubeconfig string
	storageDir string // source-controller --storage-path
	logDir     string
	// prefix begins the process and log names: "" for the hub, "spoke-<name>-" for a spoke
	prefix                    string
	sourceArgs, kustomizeArgs []string
}

// fluxProcs are the controllers startFlux started, and their ports (storage, source metrics,
// source health, kustomize metrics, kustomize health).
type fluxProcs struct {
	source, kustomize *Process
	storageAddr       string
	ports             []int
}

// commonControllerArgs are the flags every Flux controller of the environment gets.
var commonControllerArgs = []string{"--watch-all-namespaces=true", "--enable-leader-election=false", "--log-encoding=console"}

// startFlux starts source-controller and kustomize-controller on free ports, without waiting for
// them to be ready. On failure what it started is stopped.
func startFlux(s fluxSet, stopGrace time.Duration) (*fluxProcs, error) {
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	f := &fluxProcs{storageAddr: loopback(ports[0]), ports: ports}
	env := controllerEnv(s.kubeconfig)
	scArgs := append(append([]string{
		"--storage-path=" + s.storageDir,
		"--storage-addr=" + f.storageAddr,
		"--storage-adv-addr=" + f.storageAddr,
		"--metrics-addr=" + loopback(ports[1]),
		"--health-addr=" + loopback(ports[2]),
	}, commonControllerArgs...), s.sourceArgs...)
	if f.source, err = startFluxController(s, "source-controller", s.tb.SourceController, scArgs, env, ports[2]); err != nil {
		return nil, err
	}
	kcArgs := append(append([]string{
		"--feature-gates=ExternalArtifact=true",
		"--metrics-addr=" + loopback(ports[3]),
		"--health-addr=" + loopback(ports[4]),
	}, commonControllerArgs...), s.kustomizeArgs...)
	if f.kustomize, err = startFluxController(s, "kustomize-controller", s.tb.KustomizeController, kcArgs, env, ports[4]); err != nil {
		_ = f.source.Stop(stopGrace)
		return nil, err
	}
	return f, nil
}

// startFluxController starts one controller of s, named and logged with s's prefix, ready when
// healthPort's /readyz answers.
func startFluxController(s fluxSet, name, binary string, args, env []string, healthPort int) (*Process, error) {
	p, err := StartProcess(s.prefix+name, binary, args, env, filepath.Join(s.logDir, s.prefix+name+".log"))
	if err != nil {
		return nil, err
	}
	p.HealthURL = "http://" + loopback(healthPort) + "/readyz"
	return p, nil
}

// waitHealthy waits, in parallel, until every process is ready.
func waitHealthy(ctx context.Context, timeout time.Duration, ps []*Process) error {
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { errs[i] = p.waitHealthy(ctx, timeout) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

const imageReflectorName = "image-reflector-controller"

// startImageReflector starts image-reflector-controller on free ports, its badger database in
// the work directory.
func (e *Env) startImageReflector(env []string) error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	e.Ports.ImageReflectorMetrics, e.Ports.ImageReflectorHealth = ports[0], ports[1]
	dbDir := filepath.Join(e.WorkDir, imageReflectorName, "db")
	if err := os.MkdirAll(dbDir, 0o755); err != nil {
		return err
	}
	args := append(append([]string{
		"--storage-path=" + dbDir,
		// badger maps twice this much memory; its default (256 MiB) is far more than a few tags need
		"--storage-value-log-file-size=" + strconv.Itoa(16<<20),
		"--metrics-addr=" + loopback(e.Ports.ImageReflectorMetrics),
		"--health-addr=" + loopback(e.Ports.ImageReflectorHealth),
		"--log-level=info",
	}, commonControllerArgs...), e.opts.ImageReflectorArgs...)
	e.ImageReflectorController, err = StartProcess(imageReflectorName, e.TestBin.ImageReflectorController, args, env,
		filepath.Join(e.LogDir, imageReflectorName+".log"))
	if err != nil {
		return err
	}
	e.ImageReflectorController.HealthURL = "http://" + loopback(e.Ports.ImageReflectorHealth) + "/readyz"
	return nil
}

// fluxControllers lists the Flux controllers started (image-reflector-controller only with
// Options.ImageReflector).
func (e *Env) fluxControllers() []*Process {
	ps := []*Process{e.SourceController, e.KustomizeController}
	if e.ImageReflectorController != nil {
		ps = append(ps, e.ImageReflectorController)
	}
	return ps
}

func (e *Env) waitFluxControllers(ctx context.Context) error {
	ps := e.fluxControllers()
	var names []string
	for _, p := range ps {
		names = append(names, fmt.Sprintf("%s (pid %d)", p.Name, p.PID()))
	}
	e.opts.Logf("fluxenv: waiting for %s", strings.Join(names, ", "))
	return waitHealthy(ctx, e.opts.StartTimeout, ps)
}

// S3 credentials of the environment's object store: a Bucket's Secret holds them as
// accesskey and secretkey.
const (
	S3AccessKey = "fluxenv-access-key"
	S3SecretKey = "fluxenv-secret-key"
)

// startObjectServers starts the OCI registry and the S3 server beside the Git server.
func (e *Env) startObjectServers() (err error) {
	if e.Registry, err = StartRegistry(filepath.Join(e.LogDir, "registry.log")); err != nil {
		return fmt.Errorf("starting the OCI registry: %w", err)
	}
	if e.S3, err = StartS3Server(filepath.Join(e.LogDir, "s3-server.log"), S3AccessKey, S3SecretKey); err != nil {
		return fmt.Errorf("starting the S3 server: %w", err)
	}
	e.Ports.Registry, e.Ports.S3 = e.Registry.Port, e.S3.Port
	return nil
}

func loopback(port int) string {
	return "127.0.0.1:" + strconv.Itoa(port)
}

// controllerEnv is the environment of the controllers: ours, pointed at the kubeconfig.
func controllerEnv(kubeconfig string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "KUBECONFIG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "KUBECONFIG="+kubeconfig)
}

func (e *Env) startControlPlane() error {
	tb := e.TestBin
	apiserverLog, err := os.OpenFile(filepath.Join(e.LogDir, "kube-apiserver.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	etcdLog, err := os.OpenFile(filepath.Join(e.LogDir, "etcd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		apiserverLog.Close()
		return err
	}
	e.logFiles = append(e.logFiles, apiserverLog, etcdLog) // closed by Stop

	apiserverPath, etcdPath := tb.KubeAPIServer, tb.Etcd
	// envtest starts etcd and kube-apiserver without Pdeathsig; a wrapper script adds it with
	// setpriv(1) (then execs, so the PID is the binary's).
	if apiserverPath, etcdPath, err = DyingWithParent(filepath.Join(e.WorkDir, "bin"), tb); err != nil {
		return err
	}

	etcdDir := filepath.Join(e.WorkDir, "etcd")
	certDir := filepath.Join(e.WorkDir, "kube-apiserver")
	for _, d := range []string{etcdDir, certDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	useExisting := false
	e.testEnv = &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Path: apiserverPath, CertDir: certDir, Out: apiserverLog, Err: apiserverLog},
			Etcd:      &envtest.Etcd{Path: etcdPath, DataDir: etcdDir, Out: etcdLog, Err: etcdLog},
		},
		Scheme:                   e.Scheme,
		CRDDirectoryPaths:        append([]string{tb.FluxCRDsDir}, e.opts.CRDDirs...),
		ErrorIfCRDPathMissing:    true,
		UseExistingCluster:       &useExisting,
		BinaryAssetsDirectory:    tb.KubebuilderAssets,
		ControlPlaneStartTimeout: e.opts.StartTimeout,
		ControlPlaneStopTimeout:  e.opts.StopGrace,
	}
	// keep etcd's peer listener on 127.0.0.1 too (envtest's default is "localhost")
	e.testEnv.ControlPlane.Etcd.Configure().Set("listen-peer-urls", "http://127.0.0.1:0")

	cfg, startErr := e.testEnv.Start()
	// find the processes even if the start failed, so that Stop can verify they are gone
	e.findControlPlanePIDs(etcdDir, certDir)
	if startErr != nil {
		return fmt.Errorf("starting envtest control plane: %w\n--- last %d lines of etcd.log:\n%s\n--- last %d lines of kube-apiserver.log:\n%s",
			startErr, tailLines, Tail(filepath.Join(e.LogDir, "etcd.log"), tailLines),
			tailLines, Tail(filepath.Join(e.LogDir, "kube-apiserver.log"), tailLines))
	}
	e.Config = cfg
	if u, err := url.Parse(cfg.Host); err == nil {
		e.Ports.APIServer, _ = strconv.Atoi(u.Port())
	}
	if u := e.testEnv.ControlPlane.Etcd.URL; u != nil {
		e.Ports.Etcd, _ = strconv.Atoi(u.Port())
	}
	return nil
}

// RestartAPIServer kills kube-apiserver (SIGKILL, as a crash) and starts it again on the same
// port, certificates and etcd: clients keep their kubeconfig and see their requests and watches
// fail until it answers again. (A graceful stop waits for every open watch to end, which
// controllers never do by themselves.)
func (e *Env) RestartAPIServer() error {
	return e.restartControlPlane("kube-apiserver", e.testEnv.ControlPlane.APIServer)
}

// RestartEtcd kills etcd (SIGKILL) and starts it again on the same data directory and client
// URL; until it is back, kube-apiserver answers with errors.
func (e *Env) RestartEtcd() error {
	return e.restartControlPlane("etcd", e.testEnv.ControlPlane.Etcd)
}

func (e *Env) restartControlPlane(name string, p interface {
	Start() error
	Stop() error
}) error {
	for _, pi := range e.controlPlane {
		if pi.Name == name && pi.Alive() {
			if err := syscall.Kill(pi.PID, syscall.SIGKILL); err != nil {
				return fmt.Errorf("killing %s: %w", name, err)
			}
		}
	}
	// envtest reaps it and forgets it. Its Stop signals the process group first, which is gone
	// when the reaping came before Stop looked (ESRCH): that is the stop we wanted.
	if err := p.Stop(); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stopping %s: %w", name, err)
	}
	err := p.Start()
	e.findControlPlanePIDs(filepath.Join(e.WorkDir, "etcd"), filepath.Join(e.WorkDir, "kube-apiserver"))
	if err != nil {
		return fmt.Errorf("starting %s again: %w\n--- last %d lines of %s.log:\n%s", name, err, tailLines, name,
			Tail(filepath.Join(e.LogDir, name+".log"), tailLines))
	}
	return nil
}

// pdeathsigWrapper writes WorkDir/bin/<name>: a script that execs the binary under
// `setpriv --pdeathsig KILL`.
// DyingWithParent writes, into dir, wrappers that run kube-apiserver and etcd so they die with the
// process that started them (envtest starts them without Pdeathsig, so a test that panics would
// leave them running). Without setpriv(1) it returns the binaries themselves.
func DyingWithParent(dir string, tb *TestBin) (apiserver, etcd string, err error) {
	setpriv, lookErr := exec.LookPath("setpriv")
	if lookErr != nil {
		return tb.KubeAPIServer, tb.Etcd, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	if apiserver, err = pdeathsigWrapper(dir, setpriv, "kube-apiserver", tb.KubeAPIServer); err != nil {
		return "", "", err
	}
	etcd, err = pdeathsigWrapper(dir, setpriv, "etcd", tb.Etcd)
	return apiserver, etcd, err
}

func pdeathsigWrapper(dir, setpriv, name, binary string) (string, error) {
	path := filepath.Join(dir, name)
	script := fmt.Sprintf("#!/bin/sh\n# written by fluxenv: %s dies with the process that started it\nexec %s --pdeathsig KILL -- %s \"$@\"\n",
		name, shellQuote(setpriv), shellQuote(binary))
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", err
	}
	return path, nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// findControlPlanePIDs records the etcd and kube-apiserver children of this process, recognised
// by their binary and their data/cert directory.
func (e *Env) findControlPlanePIDs(etcdDir, certDir string) {
	e.controlPlane = controlPlanePIDs(e.TestBin, etcdDir, certDir, "")
}

// controlPlanePIDs finds the etcd and kube-apiserver children of this process that use etcdDir
// and certDir, named with prefix ("" for the hub, "spoke <name> " for a spoke).
func controlPlanePIDs(tb *TestBin, etcdDir, certDir, prefix string) []PIDInfo {
	var out []PIDInfo
	for _, c := range []struct{ name, exe, arg string }{
		{"etcd", tb.Etcd, "--data-dir=" + etcdDir},
		{"kube-apiserver", tb.KubeAPIServer, "--cert-dir=" + certDir},
	} {
		for _, pid := range childrenRunning(os.Getpid(), c.exe) {
			for _, a := range strings.Fields(Cmdline(pid)) {
				if a == c.arg {
					st, _ := procStartTime(pid)
					out = append(out, PIDInfo{Name: prefix + c.name, PID: pid, StartTime: st})
					break
				}
			}
		}
	}
	return out
}

// Processes lists the processes the Env started (etcd, kube-apiserver, the spokes', source-controller,
// kustomize-controller, image-reflector-controller if started, kcl-artifact-controllers, Prometheuses of StartPrometheus), with their start times so that a reused PID is not mistaken for them.
func (e *Env) Processes() []PIDInfo {
	out := append([]PIDInfo(nil), e.controlPlane...)
	for _, s := range e.spokeList() {
		out = append(out, s.Processes()...)
	}
	for _, p := range append(e.controllers(), e.prometheusProcesses()...) {
		if p.PID() != 0 {
			out = append(out, PIDInfo{Name: p.Name, PID: p.PID(), StartTime: p.startTime})
		}
	}
	return out
}

// controllers lists the controller processes: Flux's and this project's.
func (e *Env) controllers() []*Process {
	return append(e.fluxControllers(), e.KCLControllerProcesses()...)
}

// KCLControllerProcesses lists the kcl-artifact-controller processes started with
// StartKCLController, in order, restarts included.
func (e *Env) KCLControllerProcesses() []*Process {
	e.kclMu.Lock()
	defer e.kclMu.Unlock()
	ps := make([]*Process, 0, len(e.kclControllers))
	for _, c := range e.kclControllers {
		ps = append(ps, c.Process)
	}
	return ps
}

// Stop stops the controllers and Prometheuses (SIGTERM, then SIGKILL after StopGrace), the Git server and the
// control plane, and returns an error if any process the Env started is still alive afterwards.
// It is safe to call more than once.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() { e.stopErr = e.stop() })
	return e.stopErr
}

func (e *Env) stop() error {
	procs := e.Processes()
	var errs []error
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, p := range e.controllers() {
		if p == nil {
			continue
		}
		wg.Go(func() {
			if err := p.Stop(e.opts.StopGrace); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	for _, p := range e.prometheusList() {
		wg.Go(func() {
			if err := p.Stop(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	for _, s := range e.spokeList() {
		wg.Go(func() {
			if err := s.Stop(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if e.Git != nil {
		if err := e.Git.Close(); err != nil {
			errs = append(errs, fmt.Errorf("stopping git server: %w", err))
		}
	}
	if e.Registry != nil {
		errs = append(errs, e.Registry.Stop())
	}
	if e.S3 != nil {
		errs = append(errs, e.S3.Stop())
	}
	if e.testEnv != nil {
		if err := e.testEnv.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping envtest: %w", err))
		}
	}
	for _, f := range e.logFiles {
		f.Close()
	}
	// envtest reaps its processes asynchronously: give a killed one a moment to disappear
	var alive []string
	deadline := time.Now().Add(15 * time.Second)
	for {
		alive = alive[:0]
		for _, p := range procs {
			if p.Alive() {
				alive = append(alive, fmt.Sprintf("%s (pid %d)", p.Name, p.PID))
			}
		}
		if len(alive) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling /proc, not synchronisation
	}
	if len(alive) > 0 {
		errs = append(errs, fmt.Errorf("still running after Stop: %s", strings.Join(alive, ", ")))
	}
	err := errors.Join(errs...)
	if err == nil && e.removeWorkDir {
		err = os.RemoveAll(e.WorkDir)
	}
	return err
}

// WaitFor polls cond every 250ms until it reports done, the context ends, or timeout passes.
// An error from cond is not final (the object may not exist yet): it is kept as the last state.
// The returned error says what was awaited and the last state seen.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func(ctx context.Context) (done bool, state string, err error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last, lastErr := "(not checked)", ""
	for {
		done, state, err := cond(ctx)
		if done && err == nil {
			return nil
		}
		// an error (often the deadline itself, or a throttled client) is reported beside the
		// last state seen, never in its place
		if err != nil {
			lastErr = err.Error()
		} else if state != "" {
			last, lastErr = state, ""
		}
		select {
		case <-ctx.Done():
			if lastErr != "" {
				last += "; then error: " + lastErr
			}
			return fmt.Errorf("timed out after %s waiting for %s; last state: %s", timeout, what, last)
		case <-tick.C:
		}
	}
}

// LogTails returns the last n lines of every log of the environment, for test failures.
func (e *Env) LogTails(n int) string {
	var b strings.Builder
	entries, _ := os.ReadDir(e.LogDir)
	for _, ent := range entries {
		p := filepath.Join(e.LogDir, ent.Name())
		fmt.Fprintf(&b, "--- last %d lines of %s:\n%s\n", n, p, Tail(p, n))
	}
	return b.String()
}

// StartAPIServer starts a kube-apiserver and etcd of tb with envtest (both die with the test
// process), stopped when the test ends, and returns the admin config and a kubeconfig of a
// system:masters user named user.
func StartAPIServer(t testing.TB, tb *TestBin, user string) (*rest.Config, []byte) {
	t.Helper()
	apiserver, etcd, err := DyingWithParent(t.TempDir(), tb)
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{ControlPlane: envtest.ControlPlane{
		APIServer: &envtest.APIServer{Path: apiserver}, Etcd: &envtest.Etcd{Path: etcd}}}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal("starting envtest:", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	u, err := env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := u.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg, kc
}
