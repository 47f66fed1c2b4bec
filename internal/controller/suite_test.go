package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	artcfg "github.com/fluxcd/pkg/artifact/config"
	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	"github.com/fluxcd/pkg/runtime/events"
	"github.com/fluxcd/pkg/testserver"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/cachestrip"
	"github.com/kcl-flux/kcl-artifact-controller/internal/childproc"
	"github.com/kcl-flux/kcl-artifact-controller/internal/depfetch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/eventqueue"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/metrics"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ocipush"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promcheck"
	"github.com/kcl-flux/kcl-artifact-controller/internal/source"
	"github.com/kcl-flux/kcl-artifact-controller/internal/sourcecache"
	"github.com/kcl-flux/kcl-artifact-controller/internal/staging"
	"github.com/kcl-flux/kcl-artifact-controller/server"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// The suite runs the reconciler in a manager against a real kube-apiserver and etcd (envtest).
// Flux sources are simulated: the test creates GitRepository objects and sets their status to
// point at tarballs served by Flux's test artifact server (fluxcd/pkg/testserver), as
// source-controller would. Everything else (engine workers, storage, artifact server) is the
// real thing.

var (
	k8sClient   client.Client
	restConfig  *rest.Config
	testStorage *artifactstore.Store
	// testStaging and depsCacheDir are where renders are staged and dependencies cached: the
	// security tests plant markers there.
	testStaging  *staging.Area
	depsCacheDir string
	storageDir   string
	artifactURL  string                     // base URL of the controller's artifact server
	sources      *testserver.ArtifactServer // serves source artifacts, as source-controller does
	renders      atomic.Int64
	rendersIn    namespaceCounter // renders per namespace: objects of earlier tests still render
	testEnv      *envtest.Environment
	testEvents   *eventqueue.Recorder // the reconciler's event recorder
)

func TestMain(m *testing.M) {
	kclworker.ServeIfWorker()
	depfetch.ServeIfFetcher()
	ocipush.ServeIfPusher()
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(false)))
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run `make testbin` and use `make test`")
		return 1
	}
	crds := []string{filepath.Join("..", "..", "config", "crd", "bases")}
	if d := os.Getenv("FLUX_CRDS_DIR"); d != "" {
		crds = append(crds, d)
	} else {
		crds = append(crds, filepath.Join("..", "..", "bin", "crds"))
	}
	tb, err := fluxenv.LoadTestBin()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	wrappers, err := os.MkdirTemp("", "kcl-envtest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(wrappers)
	apiserver, etcd, err := fluxenv.DyingWithParent(wrappers, tb)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testEnv = &envtest.Environment{CRDDirectoryPaths: crds, ErrorIfCRDPathMissing: true,
		ControlPlane: envtest.ControlPlane{APIServer: &envtest.APIServer{Path: apiserver}, Etcd: &envtest.Etcd{Path: etcd}}}
	cfg, err := testEnv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer testEnv.Stop()
	restConfig = cfg

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop, err := startController(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the controller:", err)
		return 1
	}
	defer stop()
	return m.Run()
}

func testScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = kclv1.AddToScheme(s)
	_ = sourcev1.AddToScheme(s)
	_ = kustomizev1.AddToScheme(s)
	return s
}

// testBudget is the controller's output budget, so that a test can read its peak.
var testBudget = fairshare.NewBudget(DefaultOutputBudget)

// runtimeNamespace is the controller's own namespace ($RUNTIME_NAMESPACE): the line stopped there
// is stopped everywhere.
const runtimeNamespace = "kcl-system"

func startController(ctx context.Context, cfg *rest.Config) (func(), error) {
	var err error
	// Ordinary sources come from Flux's test artifact server; hostile ones are built by hand
	// (kclmodtest) and put in its document root.
	if scratch, err = testserver.NewTempArtifactServer(); err != nil {
		return nil, err
	}
	if sources, err = testserver.NewTempArtifactServer(); err != nil {
		return nil, err
	}
	sources.Start()

	if storageDir, err = os.MkdirTemp("", "kcl-storage-"); err != nil {
		return nil, err
	}
	// The server's address is in the store's options: listen first, serve once the store is open.
	artSrv := httptest.NewUnstartedServer(nil)
	artifactURL = "http://" + artSrv.Listener.Addr().String()
	testStorage, err = artifactstore.New(&artcfg.Options{StoragePath: storageDir,
		StorageAddress: artSrv.Listener.Addr().String(), StorageAdvAddress: artSrv.Listener.Addr().String(),
		ArtifactRetentionTTL: retentionTTL, ArtifactRetentionRecords: 2})
	if err != nil {
		return nil, err
	}
	// The manager's cache answers History in production; the API server answers it here.
	artifacts, err := server.HandlerWithOptions(testStorage, server.Options{History: func(ctx context.Context, ns, name string) ([]kclv1.ArtifactHistoryEntry, error) {
		return server.HistoryFrom(k8sClient)(ctx, ns, name)
	}, Waiting: func(ctx context.Context, ns, name string) ([]kclv1.ArtifactHistoryEntry, error) {
		return server.WaitingFrom(k8sClient)(ctx, ns, name)
	}})
	if err != nil {
		return nil, err
	}
	artSrv.Config.Handler = artifacts
	artSrv.Start()

	lib, err := kcllib.Find(os.Getenv(kcllib.EnvLib))
	if err != nil {
		if lib, err = kcllib.Find(filepath.Join("..", "..", "bin", kcllib.LibName)); err != nil {
			return nil, err
		}
	}
	// Renders run confined, as in production: the security tests depend on it.
	pool, err := kclworker.New(kclworker.Options{Size: 2, Sandbox: true, LibPath: lib,
		Command: []string{os.Args[0], kclworker.Subcommand}})
	if err != nil {
		return nil, err
	}
	stagingDir, err := os.MkdirTemp("", "kcl-staging-")
	if err != nil {
		return nil, err
	}
	stage, err := staging.New(stagingDir)
	if err != nil {
		return nil, err
	}
	testStaging = stage

	depsCache, err := os.MkdirTemp("", "kcl-deps-")
	if err != nil {
		return nil, err
	}
	depsCacheDir = depsCache
	loopback, err := kclmod.ParseNetworks([]string{"127.0.0.0/8"})
	if err != nil {
		return nil, err
	}
	// the test registries listen on 127.0.0.1, which the resolver refuses by default
	deps, err := depfetch.New(depfetch.Options{Limits: childproc.Limits{Sandbox: true},
		// a drip fails within seconds, not the default half minute
		Resolver: kclmod.Options{CacheDir: depsCache, AllowedNetworks: loopback, LowSpeedTime: 3 * time.Second}})
	if err != nil {
		return nil, err
	}
	// pushes go through the same guard as fetches, to registries on 127.0.0.1
	pusher, err := ocipush.New(ocipush.Options{Limits: childproc.Limits{Sandbox: true, Timeout: 20 * time.Second}, Network: kclmod.Options{AllowedNetworks: loopback,
		LowSpeedTime: 3 * time.Second}, StagingDir: filepath.Join(stagingDir, ".oci-push")})
	if err != nil {
		return nil, err
	}
	// the checks of spec.verify go through the same guard, to a Prometheus on 127.0.0.1
	checks, err := promcheck.New(promcheck.Options{Network: kclmod.Options{AllowedNetworks: loopback}, Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}

	// the cache keeps what the controller's cache does (cmd/kcl-artifact-controller): every test
	// reads what a stripped cache gives it
	cacheOpts := cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: map[client.Object]cache.ByObject{}}
	cachestrip.Set(cacheOpts.ByObject)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: testScheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cacheOpts, NewCache: recordCache, Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}}})
	if err != nil {
		return nil, err
	}
	// Events go to a real HTTP receiver standing for notification-controller.
	eventsReceiver = newEventReceiver()
	flux, err := events.NewRecorder(mgr, ctrl.Log, eventsReceiver.URL, "kcl-artifact-controller")
	if err != nil {
		return nil, err
	}
	// as in production: posted from a queue, off the reconcile
	recorder := eventqueue.New(flux, eventqueue.Options{Log: ctrl.Log.WithName("events")})
	testEvents = recorder
	fetcher := source.NewFetcher(source.Limits{Retries: 1, MaxDownloadSize: 10 << 20, MaxUntarSize: 10 << 20})
	sourceCache, err := sourcecache.New(sourcecache.Options{DirFor: stage.Sources, Fetch: fetcher.Fetch, Observe: metrics.RecordSourceCache})
	if err != nil {
		return nil, err
	}
	served, err := arguments.ImagePoliciesServed(mgr.GetRESTMapper())
	if err != nil {
		return nil, err
	}
	// Services stand for any kind an operator allows: envtest serves no other that tests can write
	kinds, err := arguments.ParseKinds([]string{"v1/Service"})
	if err != nil {
		return nil, err
	}
	if err := mgr.GetClient().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: runtimeNamespace}}); err != nil {
		return nil, err
	}
	r := &KCLArtifactReconciler{
		ArgumentKinds: kinds, NoImagePolicies: !served,
		Client: countingClient{mgr.GetClient()}, APIReader: countingReader{mgr.GetAPIReader()}, EventRecorder: recorder, ControllerName: "kcl-artifact-controller",
		Store: testStorage, Fetcher: fetcher, Sources: sourceCache,
		MaxOutput: 64 << 20, MaxObjects: 10_000,
		Engine: pool, Staging: stage, Deps: deps, Pusher: pusher, Checks: checks, EngineVersion: "test", NoCrossNamespaceRefs: true,
		RuntimeNamespace: runtimeNamespace,
		Renders:          func(ns string) { renders.Add(1); rendersIn.add(ns) },
		// the production defaults, but for a shorter interval floor: tests wait for retries
		Bounds: Bounds{MaxTimeout: DefaultMaxTimeout, MinInterval: time.Second, FetchTimeout: DefaultFetchTimeout,
			PublishTimeout: DefaultPublishTimeout, OutputBudget: testBudget},
	}
	if err := r.SetupWithManager(ctx, mgr, Options{Concurrent: 2, RateLimiter: runtimectrl.GetDefaultRateLimiter(),
		WatchConfigs: predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()[meta.LabelKeyWatch] == meta.LabelValueWatchEnabled
		})}); err != nil {
		return nil, err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	k8sClient, err = client.New(cfg, client.Options{Scheme: testScheme()})
	return func() {
		pool.Close()
		sources.Stop()
		artSrv.Close()
		recorder.Close()
		eventsReceiver.Close()
		os.RemoveAll(sources.Root())
		os.RemoveAll(scratch.Root())
		os.RemoveAll(storageDir)
		os.RemoveAll(depsCache)
	}, err
}

// serveSource publishes files as a source artifact on the artifact server and returns its URL
// and digest.
//
// The test server names an archive after its files' contents (not their names) and rewrites it in
// place: two tests committing the same contents would truncate and rewrite the file one of them
// is fetching (a digest mismatch, then a retry after the retry interval), or serve one the other's
// names. So the archive is built in a scratch directory and served under its own digest, written
// once (a temporary file renamed into place).
func serveSource(g Gomega, files map[string]string) (url, digest string) {
	var list []testserver.File
	for _, name := range slices.Sorted(maps.Keys(files)) {
		list = append(list, testserver.File{Name: name, Body: files[name]})
	}
	scratchMu.Lock()
	defer scratchMu.Unlock()
	built, err := scratch.ArtifactFromFiles(list)
	g.Expect(err).NotTo(HaveOccurred())
	tgz, err := os.ReadFile(filepath.Join(scratch.Root(), built))
	g.Expect(err).NotTo(HaveOccurred())
	sum := sha256.Sum256(tgz)
	name := hex.EncodeToString(sum[:]) + ".tar.gz"
	served := filepath.Join(sources.Root(), name)
	if _, err := os.Stat(served); errors.Is(err, fs.ErrNotExist) {
		tmp := served + ".tmp"
		g.Expect(os.WriteFile(tmp, tgz, 0o644)).To(Succeed())
		g.Expect(os.Rename(tmp, served)).To(Succeed())
	}
	return artifactAt(g, name)
}

var (
	// scratch builds source archives for serveSource; scratchMu serialises it.
	scratch   *testserver.ArtifactServer
	scratchMu sync.Mutex
)

// serveHostile publishes a hand-built tarball (paths with ../, bombs) on the artifact server.
func serveHostile(g Gomega, tgz []byte) (url, digest string) {
	sum := sha256.Sum256(tgz)
	name := hex.EncodeToString(sum[:]) + ".tar.gz"
	g.Expect(os.WriteFile(filepath.Join(sources.Root(), name), tgz, 0o644)).To(Succeed())
	return artifactAt(g, name)
}

func artifactAt(g Gomega, name string) (url, digest string) {
	b, err := os.ReadFile(filepath.Join(sources.Root(), name))
	g.Expect(err).NotTo(HaveOccurred())
	url, err = sources.URLForFile(name)
	g.Expect(err).NotTo(HaveOccurred())
	sum := sha256.Sum256(b)
	return url, "sha256:" + hex.EncodeToString(sum[:])
}
