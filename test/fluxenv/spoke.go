package fluxenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KubeConfigSecretKey is the key of a kubeconfig Secret that kustomize-controller reads for a
// Kustomization's spec.kubeConfig.secretRef without a key (it also accepts value.yaml).
const KubeConfigSecretKey = "value"

// Spoke is a second cluster of the environment: its own etcd and kube-apiserver, of the same
// binaries as the hub, on 127.0.0.1. By default nothing runs in it: the hub's kustomize-controller
// applies to it through a Kustomization's spec.kubeConfig, as in Flux's hub-and-spoke layout
// (fluxcd/flux2-hub-spoke-example), and reads the health of what it applied there. With
// SpokeOptions.Flux it runs its own Flux (the pull layout): the Flux CRDs and its own
// source-controller and kustomize-controller, which pull from registries themselves.
type Spoke struct {
	Name   string
	Config *rest.Config  // admin access to the spoke's kube-apiserver
	Client client.Client // uses the Scheme the spoke was started with
	// KubeConfig is a kubeconfig of a system:masters user of the spoke, credentials inline and
	// server https://127.0.0.1:<Port>, as a Secret in the hub carries it.
	KubeConfig []byte
	Port       int
	Dir        string // etcd data, certificates, wrappers
	LogDir     string // spoke-<name>-etcd.log and spoke-<name>-kube-apiserver.log (and the controllers')

	// With SpokeOptions.Flux: the kubeconfig file the controllers use (Dir/kubeconfig), the
	// controllers (logs spoke-<name>-source-controller.log, spoke-<name>-kustomize-controller.log)
	// and source-controller's storage; nil and empty otherwise.
	KubeconfigPath      string
	SourceController    *Process
	KustomizeController *Process
	StorageDir          string
	StorageAddr         string // source-controller's artifact server, 127.0.0.1:<port>

	tb        *TestBin
	testEnv   *envtest.Environment
	procs     []PIDInfo
	logFiles  []*os.File
	stopGrace time.Duration
	stopOnce  sync.Once
	stopErr   error
}

// SpokeOptions configure StartSpoke.
type SpokeOptions struct {
	// Name of the spoke, [a-z0-9-]+: its directory, log names and the kubeconfig's user.
	Name string
	// Dir holds etcd's data, the certificates and the wrappers; LogDir its logs
	// (spoke-<name>-etcd.log, spoke-<name>-kube-apiserver.log). Both created.
	Dir, LogDir string
	TestBin     *TestBin
	// Scheme of Spoke.Client; client-go's types when nil.
	Scheme *runtime.Scheme
	// StartTimeout bounds the start of etcd and kube-apiserver (default 3 minutes), StopGrace
	// their stop (default 20s).
	StartTimeout, StopGrace time.Duration
	// Flux installs the Flux CRDs of TestBin.FluxCRDsDir in the spoke and runs its own
	// source-controller and kustomize-controller (storage in Dir/source-controller), ready
	// before StartSpoke returns.
	Flux bool
}

var spokeName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// StartSpoke starts a spoke and returns when its kube-apiserver serves the kubeconfig's user.
// On failure what was started is stopped.
func StartSpoke(opts SpokeOptions) (*Spoke, error) {
	if !spokeName.MatchString(opts.Name) {
		return nil, fmt.Errorf("spoke name %q: want [a-z0-9-]+", opts.Name)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 3 * time.Minute
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = 20 * time.Second
	}
	s := &Spoke{Name: opts.Name, Dir: opts.Dir, LogDir: opts.LogDir, tb: opts.TestBin, stopGrace: opts.StopGrace}
	if err := s.start(opts); err != nil {
		if stopErr := s.Stop(); stopErr != nil {
			err = fmt.Errorf("%w (stopping what was started: %v)", err, stopErr)
		}
		return nil, fmt.Errorf("spoke %s: %w", opts.Name, err)
	}
	return s, nil
}

func (s *Spoke) start(opts SpokeOptions) error {
	etcdDir, certDir := filepath.Join(s.Dir, "etcd"), filepath.Join(s.Dir, "kube-apiserver")
	for _, d := range []string{etcdDir, certDir, s.LogDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	apiserverLog, etcdLog, err := s.openLogs()
	if err != nil {
		return err
	}
	// the wrappers make etcd and kube-apiserver die with this process, as the hub's
	apiserver, etcd, err := DyingWithParent(filepath.Join(s.Dir, "bin"), s.tb)
	if err != nil {
		return err
	}
	s.testEnv = &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer: &envtest.APIServer{Path: apiserver, CertDir: certDir, Out: apiserverLog, Err: apiserverLog},
			Etcd:      &envtest.Etcd{Path: etcd, DataDir: etcdDir, Out: etcdLog, Err: etcdLog},
		},
		BinaryAssetsDirectory:    s.tb.KubebuilderAssets,
		ControlPlaneStartTimeout: opts.StartTimeout,
		ControlPlaneStopTimeout:  opts.StopGrace,
	}
	if opts.Flux {
		s.testEnv.CRDDirectoryPaths = []string{s.tb.FluxCRDsDir}
		s.testEnv.ErrorIfCRDPathMissing = true
	}
	// every listener on 127.0.0.1 (etcd's peer listener defaults to "localhost")
	s.testEnv.ControlPlane.Etcd.Configure().Set("listen-peer-urls", "http://127.0.0.1:0")
	cfg, startErr := s.testEnv.Start()
	s.procs = controlPlanePIDs(s.tb, etcdDir, certDir, "spoke "+s.Name+" ")
	if startErr != nil {
		return fmt.Errorf("starting etcd and kube-apiserver: %w\n--- last %d lines of %s:\n%s", startErr,
			tailLines, apiserverLog.Name(), Tail(apiserverLog.Name(), tailLines))
	}
	if err := s.connect(cfg, opts.Scheme); err != nil {
		return err
	}
	if opts.Flux {
		return s.startFlux(opts)
	}
	return nil
}

// startFlux starts the spoke's own source-controller and kustomize-controller against its
// kube-apiserver, as the kubeconfig's user, and waits until both are ready.
func (s *Spoke) startFlux(opts SpokeOptions) error {
	s.KubeconfigPath = filepath.Join(s.Dir, "kubeconfig")
	if err := os.WriteFile(s.KubeconfigPath, s.KubeConfig, 0o600); err != nil {
		return err
	}
	s.StorageDir = filepath.Join(s.Dir, "source-controller", "storage")
	if err := os.MkdirAll(s.StorageDir, 0o755); err != nil {
		return err
	}
	f, err := startFlux(fluxSet{tb: s.tb, kubeconfig: s.KubeconfigPath, storageDir: s.StorageDir, logDir: s.LogDir,
		prefix: "spoke-" + s.Name + "-"}, s.stopGrace)
	if err != nil {
		return err
	}
	s.SourceController, s.KustomizeController, s.StorageAddr = f.source, f.kustomize, f.storageAddr
	return waitHealthy(context.Background(), opts.StartTimeout, s.controllers())
}

// controllers are the spoke's own Flux controllers (none without SpokeOptions.Flux).
func (s *Spoke) controllers() []*Process {
	if s.SourceController == nil {
		return nil
	}
	return []*Process{s.SourceController, s.KustomizeController}
}

func (s *Spoke) openLogs() (apiserverLog, etcdLog *os.File, err error) {
	for _, name := range []string{"kube-apiserver.log", "etcd.log"} {
		f, err := os.OpenFile(filepath.Join(s.LogDir, "spoke-"+s.Name+"-"+name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, nil, err
		}
		s.logFiles = append(s.logFiles, f) // closed by Stop
	}
	return s.logFiles[0], s.logFiles[1], nil
}

// connect checks that the spoke serves on 127.0.0.1 and makes its client and kubeconfig.
func (s *Spoke) connect(cfg *rest.Config, scheme *runtime.Scheme) error {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return err
	}
	if u.Scheme != "https" || u.Hostname() != "127.0.0.1" {
		return fmt.Errorf("kube-apiserver serves at %s, want https://127.0.0.1:<port>", cfg.Host)
	}
	if s.Port, err = strconv.Atoi(u.Port()); err != nil {
		return err
	}
	s.Config = cfg
	if s.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	user, err := s.testEnv.AddUser(envtest.User{Name: "spoke-" + s.Name + "-admin", Groups: []string{"system:masters"}}, cfg)
	if err != nil {
		return fmt.Errorf("adding the kubeconfig's user: %w", err)
	}
	s.KubeConfig, err = user.KubeConfig()
	return err
}

// KubeConfigSecret is the Secret namespace/name of the hub holding the spoke's kubeconfig
// under KubeConfigSecretKey, for a Kustomization's spec.kubeConfig.secretRef.
func (s *Spoke) KubeConfigSecret(namespace, name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{KubeConfigSecretKey: s.KubeConfig},
	}
}

// WriteKubeConfigSecret creates (or replaces the data of) the Secret KubeConfigSecret describes
// with hub, the hub's client.
func (s *Spoke) WriteKubeConfigSecret(ctx context.Context, hub client.Client, namespace, name string) error {
	want := s.KubeConfigSecret(namespace, name)
	err := hub.Create(ctx, want)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	got := &corev1.Secret{}
	if err := hub.Get(ctx, client.ObjectKeyFromObject(want), got); err != nil {
		return err
	}
	got.Data = want.Data
	return hub.Update(ctx, got)
}

// Processes are the spoke's etcd and kube-apiserver, and its Flux controllers if it runs them.
func (s *Spoke) Processes() []PIDInfo {
	out := append([]PIDInfo(nil), s.procs...)
	for _, p := range s.controllers() {
		if p.PID() != 0 {
			out = append(out, PIDInfo{Name: p.Name, PID: p.PID(), StartTime: p.startTime})
		}
	}
	return out
}

// Stop stops the spoke's controllers, then kube-apiserver and etcd, and reports any still
// running. Safe to call more than once.
func (s *Spoke) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *Spoke) stop() error {
	var errs []error
	// the controllers first: without their kube-apiserver they would only log errors
	for _, p := range s.controllers() {
		if err := p.Stop(s.stopGrace); err != nil {
			errs = append(errs, err)
		}
	}
	if s.testEnv != nil {
		if err := s.testEnv.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping spoke %s: %w", s.Name, err))
		}
	}
	for _, f := range s.logFiles {
		f.Close()
	}
	if alive := waitGone(s.procs, s.stopGrace); len(alive) > 0 {
		errs = append(errs, fmt.Errorf("spoke %s still running after Stop: %v", s.Name, alive))
	}
	return errors.Join(errs...)
}

// waitGone waits up to d for the processes to disappear (envtest reaps its processes
// asynchronously) and returns those still alive.
func waitGone(procs []PIDInfo, d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		var alive []string
		for _, p := range procs {
			if p.Alive() {
				alive = append(alive, fmt.Sprintf("%s (pid %d)", p.Name, p.PID))
			}
		}
		if len(alive) == 0 || time.Now().After(deadline) {
			return alive
		}
		time.Sleep(100 * time.Millisecond) // polling /proc, not synchronisation
	}
}

// StartSpoke starts a spoke beside the hub (see Spoke): its files under WorkDir/spokes/<name>,
// its logs in LogDir as spoke-<name>-etcd.log and spoke-<name>-kube-apiserver.log, its client of
// the hub's Scheme. Env.Stop stops it too.
func (e *Env) StartSpoke(name string) (*Spoke, error) { return e.startSpoke(name, false) }

// StartFluxSpoke is StartSpoke with the spoke's own Flux (SpokeOptions.Flux), for the pull
// layout: it returns when the spoke's source-controller and kustomize-controller are ready.
func (e *Env) StartFluxSpoke(name string) (*Spoke, error) { return e.startSpoke(name, true) }

func (e *Env) startSpoke(name string, flux bool) (*Spoke, error) {
	s, err := StartSpoke(SpokeOptions{
		Name: name, Dir: filepath.Join(e.WorkDir, "spokes", name), LogDir: e.LogDir,
		TestBin: e.TestBin, Scheme: e.Scheme, StartTimeout: e.opts.StartTimeout, StopGrace: e.opts.StopGrace,
		Flux: flux,
	})
	if err != nil {
		return nil, err
	}
	e.spokeMu.Lock()
	e.spokes = append(e.spokes, s)
	e.spokeMu.Unlock()
	e.opts.Logf("fluxenv: spoke %s up at %s", name, s.Config.Host)
	return s, nil
}

// spokeList is the spokes started with StartSpoke.
func (e *Env) spokeList() []*Spoke {
	e.spokeMu.Lock()
	defer e.spokeMu.Unlock()
	return append([]*Spoke(nil), e.spokes...)
}
