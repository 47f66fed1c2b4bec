package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	artcfg "github.com/fluxcd/pkg/artifact/config"
	"github.com/fluxcd/pkg/runtime/acl"
	runtimeclient "github.com/fluxcd/pkg/runtime/client"
	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	"github.com/fluxcd/pkg/runtime/events"
	feathelper "github.com/fluxcd/pkg/runtime/features"
	"github.com/fluxcd/pkg/runtime/jitter"
	"github.com/fluxcd/pkg/runtime/leaderelection"
	"github.com/fluxcd/pkg/runtime/logger"
	fluxmetrics "github.com/fluxcd/pkg/runtime/metrics"
	"github.com/fluxcd/pkg/runtime/pprof"
	"github.com/fluxcd/pkg/runtime/probes"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/go-logr/logr"
	flag "github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/cachestrip"
	"github.com/kcl-flux/kcl-artifact-controller/internal/cli"
	"github.com/kcl-flux/kcl-artifact-controller/internal/controller"
	"github.com/kcl-flux/kcl-artifact-controller/internal/depfetch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/eventqueue"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/features"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/metrics"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ocipush"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promcheck"
	"github.com/kcl-flux/kcl-artifact-controller/internal/sandbox"
	"github.com/kcl-flux/kcl-artifact-controller/internal/source"
	"github.com/kcl-flux/kcl-artifact-controller/internal/sourcecache"
	"github.com/kcl-flux/kcl-artifact-controller/internal/staging"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ui"
	"github.com/kcl-flux/kcl-artifact-controller/server"
)

const controllerName = "kcl-artifact-controller"

type runFlags struct {
	metricsAddr, healthAddr, eventsAddr string
	concurrent, concurrentPerNamespace  int
	workersPerNamespace                 int
	bounds                              controller.Bounds
	outputBudget                        uint64
	kclLib                              string
	workerBinary                        string
	workers                             int
	renderTimeout                       time.Duration
	memoryLimit                         uint64
	maxRenders                          int
	idleWorkers                         int
	idleMemory                          uint64
	workerIdleTimeout                   time.Duration
	sandbox                             string
	maxOutput                           uint64
	server                              server.Options
	uiAddr                              string
	urlKeyFile, previousURLKeyFile      string
	maxObjects                          int
	argumentsFromKinds                  []string
	stagingDir                          string
	fetch                               source.Limits
	sourceCache                         sourcecache.Options
	depsAllowedNetworks                 []string
	depsDeniedNetworks                  []string
	depsProxy                           string
	deps                                kclmod.Options
	depFetch                            depfetch.Options
	ociPush                             ocipush.Options
	checks                              promcheck.Options

	client      runtimeclient.Options
	watch       runtimectrl.WatchOptions
	jitter      jitter.IntervalOptions
	features    feathelper.FeatureGates
	log         logger.Options
	leader      leaderelection.Options
	rateLimiter runtimectrl.RateLimiterOptions
	acl         acl.Options
	artifact    artcfg.Options
}

func (f *runFlags) bind(fs *flag.FlagSet) {
	defaultRegistry, defaultRepository := kclmod.RegistryFromEnv()
	fs.StringVar(&f.metricsAddr, "metrics-addr", ":8080", "The address the metric endpoint binds to.")
	fs.StringVar(&f.healthAddr, "health-addr", ":9440", "The address the health endpoint binds to.")
	fs.StringVar(&f.eventsAddr, "events-addr", "", "The address of the events receiver (notification-controller).")
	fs.IntVar(&f.concurrent, "concurrent", 4, "The number of concurrent KCLArtifact reconciles.")
	fs.StringVar(&f.kclLib, "kcl-lib", "", "Path of the KCL engine library (default: $KCL_LIB, then beside the binary).")
	fs.StringVar(&f.workerBinary, "kcl-worker-binary", "",
		"Path of the KCL worker binary (default: "+kclworker.WorkerBinary+" beside this binary, else this binary itself, which keeps more memory per warm worker).")
	fs.IntVar(&f.concurrentPerNamespace, "concurrent-per-namespace", 0,
		"The most reconciles of one namespace running at once (default: half of --concurrent, at least one); waiting namespaces take turns.")
	fs.IntVar(&f.workers, "kcl-workers", 2, "The number of KCL engine worker processes, hence of concurrent renders.")
	fs.IntVar(&f.workersPerNamespace, "kcl-workers-per-namespace", 0,
		"The most renders of one namespace running at once (default: half of --kcl-workers, at least one); waiting namespaces take turns.")
	fs.DurationVar(&f.bounds.MaxTimeout, "max-timeout", controller.DefaultMaxTimeout,
		"The longest a KCLArtifact's spec.timeout, and the timeout of its generated Kustomizations, may be; longer ones are cut to it.")
	fs.DurationVar(&f.bounds.MinInterval, "min-interval", controller.DefaultMinInterval,
		"The shortest spec.interval and spec.retryInterval (the generated Kustomizations' too); shorter ones are raised to it.")
	fs.DurationVar(&f.bounds.FetchTimeout, "source-fetch-timeout", controller.DefaultFetchTimeout,
		"The longest downloading and unpacking a source artifact may take, within the KCLArtifact's timeout.")
	fs.DurationVar(&f.bounds.ExpressionBudget, "expression-time-budget", controller.DefaultExpressionBudget,
		"The longest one evaluation of a CEL expression (argumentsFrom values, spec.exports) may run, whatever the KCLArtifact's timeout; "+
			"a longer one is stopped at its next step and the reconcile fails (ArgumentsFailed, ExportFailed) and is retried.")
	fs.Uint64Var(&f.outputBudget, "kcl-output-budget", controller.DefaultOutputBudget,
		"The rendered output all reconciles together may hold in memory, in bytes; a render over 1 MiB waits for its part (one larger than the budget runs alone).")
	fs.DurationVar(&f.renderTimeout, "kcl-render-timeout", kclworker.DefaultTimeout,
		"The longest a render may take (a KCLArtifact's spec.timeout can only shorten it); the worker is killed after.")
	fs.Uint64Var(&f.memoryLimit, "kcl-memory-limit", kclworker.DefaultMemoryLimit,
		"The memory limit of a KCL worker (heap and anonymous mappings, RLIMIT_DATA), in bytes.")
	fs.IntVar(&f.maxRenders, "kcl-max-renders", kclworker.DefaultMaxCalls, "Renders after which a KCL worker is replaced.")
	fs.IntVar(&f.idleWorkers, "kcl-idle-workers", kclworker.DefaultMaxIdle,
		"The idle KCL workers kept warm, in all namespaces together; a worker only ever renders for one namespace.")
	fs.Uint64Var(&f.idleMemory, "kcl-idle-memory", kclworker.DefaultMaxIdleMemory,
		"The private memory the idle KCL workers may keep, all namespaces together, in bytes; the least recently used go first.")
	fs.DurationVar(&f.workerIdleTimeout, "kcl-worker-idle-timeout", kclworker.DefaultIdleTimeout, "Stop a KCL worker idle for this long.")
	fs.StringVar(&f.sandbox, "kcl-sandbox", sandboxOn,
		"Confine renders: a worker reads only its namespace's staged sources, writes nothing, has no network or environment "+
			"(Linux Landlock and seccomp; the controller refuses to start without Landlock). 'off' is UNSAFE: "+
			"any KCL author can then read the controller's files, token and environment.")
	fs.Uint64Var(&f.maxOutput, "kcl-max-output-size", kclworker.DefaultMaxOutput,
		"The largest rendered output, in bytes; a larger one fails the render (OutputLimitExceeded) before the controller holds it.")
	fs.IntVar(&f.maxObjects, "kcl-max-objects", 10_000, "The most objects a render may produce.")
	fs.StringSliceVar(&f.argumentsFromKinds, "arguments-from-kinds", nil,
		"Kinds KCLArtifacts may read arguments from with CEL expressions or field paths, as <group>/<version>/<Kind> "+
			"(v1/<Kind> for the core group), in their own namespace; grant the controller get, list and watch on exactly these "+
			"(config/rbac/arguments_from_role.yaml). Secrets are refused: they are read with argumentsFrom kind Secret.")
	fs.StringVar(&f.stagingDir, "kcl-staging-dir", filepath.Join(os.TempDir(), "kcl-staging"),
		"Where each render's source and dependencies are staged, one directory per namespace; emptied at start.")
	fs.StringVar(&f.deps.CacheDir, "kcl-deps-cache-dir", filepath.Join(os.TempDir(), "kcl-deps"),
		"The cache of kcl.mod dependencies, shared by all KCLArtifacts.")
	fs.Int64Var(&f.deps.MaxCacheBytes, "kcl-deps-cache-size", kclmod.DefaultMaxCacheBytes, "The size bound of the dependency cache, in bytes.")
	fs.BoolVar(&f.deps.ForbidRemote, "kcl-deps-no-remote", false, "Allow only vendored and local path kcl.mod dependencies.")
	fs.StringSliceVar(&f.deps.AllowedHosts, "kcl-deps-allowed-hosts", nil,
		"Hosts (globs, optionally host:port) kcl.mod dependencies may be fetched from, redirects and token hosts included; empty allows any.")
	fs.StringSliceVar(&f.depsAllowedNetworks, "kcl-deps-allowed-networks", nil,
		"CIDRs dependencies may be fetched from although refused by default: this host's own addresses and every special-purpose range "+
			"(loopback, private, link-local such as cloud metadata, documentation, benchmarking, multicast, reserved...; docs/sources.md lists them). "+
			"Name an in-cluster registry's address or range here.")
	fs.StringVar(&f.depsProxy, "kcl-deps-proxy", "",
		"An HTTP(S) proxy for kcl.mod dependency fetches, for clusters that reach registries only through one "+
			"(HTTPS_PROXY is never used). The allowed hosts still apply to what is fetched; the network checks apply to the proxy's address.")
	fs.StringSliceVar(&f.depsDeniedNetworks, "kcl-deps-denied-networks", nil,
		"More CIDRs dependencies may not be fetched from, such as the cluster's pod and service ranges.")
	fs.IntVar(&f.deps.MaxPackageFiles, "kcl-deps-max-entries", kclmod.DefaultMaxPackageFiles,
		"The most files and directories in one downloaded dependency.")
	fs.Int64Var(&f.deps.MaxPackageBytes, "kcl-deps-max-package-size", kclmod.DefaultMaxPackageBytes,
		"The largest downloaded dependency (its files), in bytes.")
	fs.DurationVar(&f.depFetch.Timeout, "kcl-deps-timeout", depfetch.DefaultTimeout,
		"The longest a KCLArtifact's dependency fetch may take; its fetch process is killed after.")
	fs.Uint64Var(&f.depFetch.MemoryLimit, "kcl-deps-memory-limit", depfetch.DefaultMemoryLimit,
		"The memory limit of a dependency fetch process (RLIMIT_DATA), in bytes.")
	fs.IntVar(&f.depFetch.Size, "kcl-deps-fetchers", depfetch.DefaultSize,
		"The dependency fetch processes running at once; one namespace holds at most half of them.")
	fs.DurationVar(&f.ociPush.Timeout, "oci-push-timeout", ocipush.DefaultTimeout,
		"The longest a push of spec.publish.oci may take; its push process is killed after.")
	fs.Uint64Var(&f.ociPush.MemoryLimit, "oci-push-memory-limit", ocipush.DefaultMemoryLimit,
		"The memory limit of a push process (RLIMIT_DATA), in bytes.")
	fs.IntVar(&f.checks.Slots, "verify-queries", promcheck.DefaultSlots,
		"The Prometheus queries of spec.verify running at once; one namespace holds at most half of them. Queries reach Prometheus through the guard of --kcl-deps-allowed-hosts, --kcl-deps-allowed-networks, --kcl-deps-denied-networks and --kcl-deps-proxy.")
	fs.DurationVar(&f.checks.Timeout, "verify-query-timeout", promcheck.DefaultTimeout,
		"The longest one Prometheus query of spec.verify may take, its wait for a query slot included.")
	fs.IntVar(&f.ociPush.Size, "oci-pushers", ocipush.DefaultSize,
		"The push processes running at once; one namespace holds at most half of them. Pushes reach registries through the guard of --kcl-deps-allowed-hosts, --kcl-deps-allowed-networks, --kcl-deps-denied-networks and --kcl-deps-proxy.")
	fs.Int64Var(&f.deps.MinSpeed, "kcl-deps-min-speed", kclmod.DefaultMinSpeed,
		"The slowest a registry or Git server may send, in bytes per second averaged over --kcl-deps-low-speed-time; negative turns the rule off.")
	fs.DurationVar(&f.deps.LowSpeedTime, "kcl-deps-low-speed-time", kclmod.DefaultLowSpeedTime,
		"The window over which --kcl-deps-min-speed is measured, from the request on.")
	fs.StringVar(&f.deps.DefaultRegistry, "kcl-default-registry", defaultRegistry,
		"The registry of dependencies given by version only, such as k8s = \"1.31.2\" (kcl's KPM_REG).")
	fs.StringVar(&f.deps.DefaultRepository, "kcl-default-repository", defaultRepository,
		"The repository prefix of dependencies given by version only (kcl's KPM_REPO).")
	fs.Int64Var(&f.sourceCache.MaxBytes, "kcl-source-cache-size", sourcecache.DefaultMaxBytes,
		"The size bound of the unpacked source artifacts kept for renders of the same revision, in bytes.")
	fs.DurationVar(&f.sourceCache.MaxAge, "kcl-source-cache-max-age", sourcecache.DefaultMaxAge,
		"Drop an unpacked source artifact unused for this long.")
	fs.IntVar(&f.fetch.Retries, "http-retry", 9, "The maximum number of retries when downloading a source artifact.")
	fs.IntVar(&f.fetch.MaxDownloadSize, "max-source-size", 50<<20, "The largest source artifact to download, in bytes.")
	fs.IntVar(&f.fetch.MaxUntarSize, "max-source-untar-size", 100<<20, "The largest unpacked source artifact, in bytes.")
	fs.IntVar(&f.fetch.MaxEntries, "max-source-entries", source.DefaultMaxEntries,
		"The most files and directories in a source artifact; empty files pass every size bound.")
	fs.IntVar(&f.server.MaxYAMLViews, "server-yaml-views", server.DefaultMaxYAMLViews,
		"The most YAML views (NAME.yaml) the artifact server renders at once; more get 503 and Retry-After.")
	fs.DurationVar(&f.server.WriteTimeout, "server-write-timeout", server.DefaultWriteTimeout,
		"The longest the artifact server spends writing one response, so clients that stop reading are let go.")
	fs.Int64Var(&f.server.MaxDiffYAML, "server-diff-max-size", server.DefaultMaxDiffYAML,
		"The most YAML of one artifact that a diff (artifact server and UI) compares, in bytes; larger ones are refused.")
	bindDeprecatedAliases(fs, map[string]string{"artifact-fetch-retries": "http-retry",
		"artifact-yaml-views": "server-yaml-views", "artifact-write-timeout": "server-write-timeout",
		"artifact-diff-max-size": "server-diff-max-size"})
	fs.BoolVar(&f.server.ShowSecrets, "show-secret-values", false,
		"Show the values of Secrets in diffs and the UI instead of masking them.")
	fs.StringVar(&f.uiAddr, "ui-addr", "127.0.0.1:9091", "The address of the browser view of rendered artifacts, history and diffs: "+
		"by default the loopback only, which in a Pod only a port-forward reaches (flux kcl ui); off when empty.")
	fs.StringVar(&f.urlKeyFile, "storage-url-key-file", "", "A file holding the key (32 bytes or more) of the tokens "+
		"that artifact URLs carry, e.g. from a Secret; by default a random key created in the storage directory at the first start.")
	fs.StringVar(&f.previousURLKeyFile, "storage-url-previous-key-file", "", "A file holding the previous key of the URL tokens, "+
		"during a rotation of --storage-url-key-file: the artifact server still accepts the URLs it signed, while every URL the "+
		"controller publishes carries the new key's token (docs/security.md#rotating-the-url-key).")
	fs.StringVar(&f.fetch.HostnameOverwrite, "source-hostname-overwrite", "", "Replace the host of source artifact URLs.")
	f.client.BindFlags(fs)
	f.watch.BindFlags(fs)
	f.jitter.BindFlags(fs)
	f.features.BindFlags(fs)
	f.log.BindFlags(fs)
	f.leader.BindFlags(fs)
	f.rateLimiter.BindFlags(fs)
	f.acl.BindFlags(fs)
	f.artifact.BindFlags(fs)
}

// bindDeprecatedAliases keeps old flag names working for one release: each sets its new flag's
// value, says it is deprecated when used, and is left out of the usage.
func bindDeprecatedAliases(fs *flag.FlagSet, aliases map[string]string) {
	for old, current := range aliases {
		fl := fs.Lookup(current)
		fs.Var(fl.Value, old, fl.Usage)
		fs.Lookup(old).DefValue = fl.DefValue
		_ = fs.MarkDeprecated(old, "use --"+current)
	}
}

func runMain(args []string) int {
	var f runFlags
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	f.bind(fs)
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: kcl-artifact-controller run [flags]\n\nRuns the controller. Flags:\n%s", fs.FlagUsages())
	}
	if exit, stop := cli.Parse(fs, args, os.Stderr); stop {
		return exit
	}
	logger.SetLogger(logger.NewLogger(f.log))
	if err := run(ctrl.SetupSignalHandler(), f); err != nil {
		ctrl.Log.Error(err, "controller failed")
		return 1
	}
	return 0
}

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kclv1.AddToScheme,
		sourcev1.AddToScheme, kustomizev1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

func run(ctx context.Context, f runFlags) error {
	log := ctrl.Log.WithName("setup")
	w, err := f.settings(log)
	if err != nil {
		return err
	}
	area, err := staging.New(f.stagingDir)
	if err != nil {
		return fmt.Errorf("staging directory: %w", err)
	}
	defer area.Close()
	pool, engineVersion, err := startEngine(ctx, f, area)
	if err != nil {
		return err
	}
	defer pool.Close()
	log.Info("KCL engine ready", "version", engineVersion, "workers", f.workers, "sandbox", f.sandbox,
		"confinement", sandboxState(f), "workerCommand", strings.Join(pool.Options().Command, " "))
	metrics.RecordSandbox(f.sandbox == sandboxOn, sandbox.ABI())

	f.depFetch.Resolver, f.depFetch.Sandbox = f.deps, f.sandbox == sandboxOn
	deps, err := depfetch.New(f.depFetch)
	if err != nil {
		return fmt.Errorf("dependency resolver: %w", err)
	}
	// a push reaches registries through the dependency fetches' guard: one rule for every
	// connection a tenant asks for
	f.ociPush.Network, f.ociPush.Sandbox = f.deps, f.sandbox == sandboxOn
	f.ociPush.StagingDir = filepath.Join(f.stagingDir, ".oci-push")
	pusher, err := ocipush.New(f.ociPush)
	if err != nil {
		return fmt.Errorf("OCI pusher: %w", err)
	}
	// the checks of spec.verify reach Prometheus through the same guard
	f.checks.Network = f.deps
	checks, err := promcheck.New(f.checks)
	if err != nil {
		return fmt.Errorf("verification checks: %w", err)
	}
	f.bounds.PublishTimeout = controller.DefaultPublishTimeout
	f.bounds.OutputBudget = fairshare.NewBudget(int64(f.outputBudget))
	if err := metrics.RegisterEngineMetrics(pool, deps, f.bounds.OutputBudget); err != nil {
		return err
	}
	store, err := openStore(f)
	if err != nil {
		return err
	}
	mgr, err := newManager(f, w, log)
	if err != nil {
		return err
	}
	flux, err := events.NewRecorder(mgr, ctrl.Log, f.eventsAddr, controllerName)
	if err != nil {
		return fmt.Errorf("event recorder: %w", err)
	}
	// Posts to notification-controller leave the reconcile; the deferred Close runs after
	// mgr.Start has returned, so the last reconciles' events are queued before the drain.
	recorder := eventqueue.New(flux, eventqueue.Options{Log: ctrl.Log.WithName("events")})
	defer recorder.Close()
	sources, err := startSourceCache(f, area)
	if err != nil {
		return err
	}
	kinds, noImagePolicies, err := inputKinds(mgr, f.argumentsFromKinds)
	if err != nil {
		return err
	}
	if noImagePolicies {
		log.Info("the API server does not serve ImagePolicies: argumentsFrom kind ImagePolicy reports it until a restart after image-reflector-controller's CRDs are installed")
	}
	r := &controller.KCLArtifactReconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), EventRecorder: recorder, ControllerName: controllerName,
		Metrics: runtimectrl.NewMetrics(mgr, fluxmetrics.MustMakeRecorder(), kclv1.Finalizer),
		Store:   store, Fetcher: source.NewFetcher(f.fetch), Sources: sources, Engine: pool, Staging: area, Deps: deps,
		Pusher: pusher, Checks: checks, EngineVersion: engineVersion, NoCrossNamespaceRefs: f.acl.NoCrossNamespaceRefs,
		MaxOutput: int(f.maxOutput), MaxObjects: f.maxObjects, Bounds: f.bounds,
		ArgumentKinds: kinds, NoImagePolicies: noImagePolicies, RuntimeNamespace: os.Getenv("RUNTIME_NAMESPACE"),
	}
	if err := r.SetupWithManager(ctx, mgr, controller.Options{
		Concurrent: f.concurrent, PerNamespace: f.concurrentPerNamespace, RateLimiter: runtimectrl.GetRateLimiter(f.rateLimiter), WatchConfigs: w.configsPredicate,
	}); err != nil {
		return err
	}
	f.server.History = server.HistoryFrom(mgr.GetCache())
	f.server.Waiting = server.WaitingFrom(mgr.GetCache())
	// the server's diffs and the browser view mask the values of the KCLArtifacts' Secrets
	f.server.Sensitive = arguments.SensitiveFrom(mgr.GetCache(), mgr.GetAPIReader())
	if err := addArtifactServer(mgr, f, store, log); err != nil {
		return err
	}
	if f.uiAddr != "" {
		if err := addUI(mgr, f, store, log); err != nil {
			return err
		}
	}
	log.Info("starting manager")
	return mgr.Start(ctx)
}

// openStore opens the artifact storage with the keys of its URL tokens.
func openStore(f runFlags) (*artifactstore.Store, error) {
	store, err := artifactstore.New(&f.artifact)
	if err != nil {
		return nil, fmt.Errorf("artifact storage: %w", err)
	}
	for _, k := range []struct {
		flag, file string
		set        func([]byte) error
	}{
		{"--storage-url-key-file", f.urlKeyFile, store.SetURLKey},
		{"--storage-url-previous-key-file", f.previousURLKeyFile, store.SetPreviousURLKey},
	} {
		if k.file == "" {
			continue
		}
		key, err := os.ReadFile(k.file)
		if err == nil {
			err = k.set(key)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.flag, err)
		}
	}
	return store, nil
}

// newManager is the manager with Flux's health checks.
func newManager(f runFlags, w watching, log logr.Logger) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(restConfig(f), managerOptions(f, w))
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	probes.SetupChecks(mgr, log)
	// Only the leader is ready, as Flux's controllers are from 2.10 (probes.LeaderElectedReadyz,
	// newer than the fluxcd/pkg/runtime here): a Service in front of two replicas then sends
	// kustomize-controller to the one that serves the artifacts.
	if err := mgr.AddReadyzCheck("leader-election", leaderElected(mgr.Elected())); err != nil {
		return nil, err
	}
	return mgr, nil
}

// addArtifactServer serves the artifacts (f.server) from the leader only: it is the one writing
// them.
func addArtifactServer(mgr ctrl.Manager, f runFlags, store *artifactstore.Store, log logr.Logger) error {
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		log.Info("artifact server starting", "addr", f.artifact.StorageAddress, "advertised", store.Hostname)
		return server.StartWithOptions(ctx, f.artifact.StorageAddress, store, f.server)
	}))
}

// leaderElected fails until this instance leads; without leader election it leads at once.
func leaderElected(elected <-chan struct{}) healthz.Checker {
	return func(*http.Request) error {
		select {
		case <-elected:
			return nil
		default:
			return errors.New("not the leader")
		}
	}
}

// addUI serves the browser view; like the artifact server, only on the leader, which holds the
// artifacts it shows.
func addUI(mgr manager.Manager, f runFlags, store *artifactstore.Store, log logr.Logger) error {
	h, err := ui.New(ui.Options{Reader: mgr.GetCache(), StorageRoot: f.artifact.StoragePath, Store: store,
		ShowSecrets: f.server.ShowSecrets, MaxYAML: f.server.MaxDiffYAML, Log: log.WithName("ui"),
		Sensitive: f.server.Sensitive})
	if err != nil {
		return err
	}
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		log.Info("browser view starting", "addr", f.uiAddr)
		return ui.Start(ctx, f.uiAddr, h)
	}))
}

// startSourceCache keeps unpacked sources beside the staging directories (hard links need the
// same filesystem), in a directory no namespace's workers can read.
func startSourceCache(f runFlags, area *staging.Area) (*sourcecache.Cache, error) {
	o := f.sourceCache
	o.DirFor, o.Copy, o.Fetch = area.Sources, f.sandbox == sandboxOff, source.NewFetcher(f.fetch).Fetch
	o.Observe = metrics.RecordSourceCache
	return sourcecache.New(o)
}

const (
	sandboxOn  = "on"
	sandboxOff = "off"
)

func sandboxState(f runFlags) string {
	if f.sandbox == sandboxOff {
		return "none: UNSAFE, KCL programs run with the controller's access"
	}
	return sandbox.Describe()
}

// startEngine starts the worker pool and asks a first worker, confined as renders will be, for
// the engine version: a sandbox that cannot be set up stops the controller here.
func startEngine(ctx context.Context, f runFlags, area *staging.Area) (*kclworker.Pool, string, error) {
	switch f.sandbox {
	case sandboxOn:
		if err := sandbox.Check(); err != nil {
			return nil, "", fmt.Errorf("%w; --kcl-sandbox=off runs KCL programs unconfined (unsafe: only where every "+
				"KCL author is trusted with the controller's permissions)", err)
		}
	case sandboxOff:
	default:
		return nil, "", fmt.Errorf("--kcl-sandbox must be %s or %s, not %q", sandboxOn, sandboxOff, f.sandbox)
	}
	lib, err := kcllib.Find(f.kclLib)
	if err != nil {
		return nil, "", err
	}
	var command []string
	if f.workerBinary != "" {
		command = []string{f.workerBinary, kclworker.Subcommand}
	}
	pool, err := kclworker.New(kclworker.Options{Size: f.workers, MaxIdle: f.idleWorkers, MaxIdleMemory: f.idleMemory, IdleTimeout: f.workerIdleTimeout,
		Sandbox: f.sandbox == sandboxOn, LibPath: lib, Timeout: f.renderTimeout, MemoryLimit: f.memoryLimit, MaxCalls: f.maxRenders,
		MaxOutput: f.maxOutput, PerDomain: f.workersPerNamespace, Waited: metrics.RecordWorkerWait, Command: command})
	if err != nil {
		return nil, "", err
	}
	probe, err := area.Private("startup")
	if err != nil {
		pool.Close()
		return nil, "", err
	}
	s := pool.Session(kclworker.Domain{Name: "_startup", Roots: []string{probe}}, probe)
	v, err := kcllib.GetVersion(func(m string, a []byte) ([]byte, error) { return s.Call(ctx, m, a) })
	pool.Retire("_startup")
	if err != nil {
		pool.Close()
		return nil, "", fmt.Errorf("starting the KCL engine %s: %w", lib, err)
	}
	return pool, v.Version + "-" + v.Checksum, nil
}

// watching is what the manager watches and caches, from the watch flags and feature gates.
type watching struct {
	objects labels.Selector // KCLArtifacts (--watch-label-selector, for sharding)
	configs labels.Selector // ConfigMaps and Secrets (--watch-configs-label-selector)
	// configsPredicate filters ConfigMap and Secret events; nil when they are not watched.
	configsPredicate predicate.Predicate
	cacheConfigs     bool
}

// settings checks the flags that need more than parsing, before anything starts.
func (f *runFlags) settings(log logr.Logger) (watching, error) {
	var w watching
	if err := f.features.WithLogger(log).SupportedFeatures(features.FeatureGates()); err != nil {
		return w, fmt.Errorf("--feature-gates: %w", err)
	}
	if err := f.jitter.SetGlobalJitter(nil); err != nil {
		return w, fmt.Errorf("--interval-jitter-percentage: %w", err)
	}
	if f.bounds.ExpressionBudget <= 0 {
		return w, fmt.Errorf("--expression-time-budget: %v is not a positive duration", f.bounds.ExpressionBudget)
	}
	var err error
	if w.objects, err = runtimectrl.GetWatchSelector(f.watch); err != nil {
		return w, fmt.Errorf("--watch-label-selector: %w", err)
	}
	if w.configs, err = labels.Parse(f.watch.ConfigsLabelSelector); err != nil {
		return w, fmt.Errorf("--watch-configs-label-selector: %w", err)
	}
	if !features.Enabled(features.DisableConfigWatchers) {
		w.configsPredicate = predicate.NewPredicateFuncs(func(o ctrlclient.Object) bool {
			return w.configs.Matches(labels.Set(o.GetLabels()))
		})
	}
	w.cacheConfigs = features.Enabled(features.CacheSecretsAndConfigMaps)
	if f.deps.AllowedNetworks, err = kclmod.ParseNetworks(f.depsAllowedNetworks); err != nil {
		return w, fmt.Errorf("--kcl-deps-allowed-networks: %w", err)
	}
	if f.deps.DeniedNetworks, err = kclmod.ParseNetworks(f.depsDeniedNetworks); err != nil {
		return w, fmt.Errorf("--kcl-deps-denied-networks: %w", err)
	}
	if f.deps.Proxy, err = kclmod.ParseProxy(f.depsProxy); err != nil {
		return w, fmt.Errorf("--kcl-deps-proxy: %w", err)
	}
	return w, nil
}

// leaderElectionID is the lease of this instance; each shard (--watch-label-selector) elects its
// own leader, as Flux's controllers do.
func leaderElectionID(w runtimectrl.WatchOptions) string {
	id := controllerName + "-leader-election"
	if w.LabelSelector != "" {
		id = leaderelection.GenerateID(id, w.LabelSelector)
	}
	return id
}

// restConfig is the API server's address and credentials. Responses come uncompressed: the API
// server is next to the controller, and gzip on every watch event cost both of them CPU (4% of
// the controller's in a re-publish, see docs/benchmarks.md#scale) to save bandwidth nobody lacks.
func restConfig(f runFlags) *rest.Config {
	cfg := runtimeclient.GetConfigOrDie(f.client)
	cfg.DisableCompression = true
	return cfg
}

func managerOptions(f runFlags, w watching) ctrl.Options {
	opts := ctrl.Options{
		Scheme:                        newScheme(),
		Metrics:                       metricsserver.Options{BindAddress: f.metricsAddr, ExtraHandlers: pprof.GetHandlers()},
		HealthProbeBindAddress:        f.healthAddr,
		LeaderElection:                f.leader.Enable,
		LeaderElectionReleaseOnCancel: f.leader.ReleaseOnCancel,
		LeaseDuration:                 &f.leader.LeaseDuration,
		RenewDeadline:                 &f.leader.RenewDeadline,
		RetryPeriod:                   &f.leader.RetryPeriod,
		LeaderElectionID:              leaderElectionID(f.watch),
		LeaderElectionNamespace:       os.Getenv("RUNTIME_NAMESPACE"),
		Logger:                        ctrl.Log,
		// A shard caches, hence reconciles, only the KCLArtifacts its selector matches. Managed
		// fields are most of a server-side applied object's size, and nothing here reads them
		// from the cache.
		Cache: ctrlcache.Options{ByObject: map[ctrlclient.Object]ctrlcache.ByObject{
			&kclv1.KCLArtifact{}: {Label: w.objects},
		}, DefaultTransform: ctrlcache.TransformStripManagedFields()},
	}
	if !w.cacheConfigs {
		// Arguments are read straight from the API; only the watched ConfigMaps and Secrets are
		// cached, to trigger renders when they change.
		opts.Client = ctrlclient.Options{Cache: &ctrlclient.CacheOptions{
			DisableFor: []ctrlclient.Object{&corev1.ConfigMap{}, &corev1.Secret{}},
		}}
		opts.Cache.ByObject[&corev1.ConfigMap{}] = ctrlcache.ByObject{Label: w.configs}
		opts.Cache.ByObject[&corev1.Secret{}] = ctrlcache.ByObject{Label: w.configs}
	}
	// ImagePolicies and the allowed kinds are read as unstructured objects, from the cache their
	// watches fill: a reconcile costs the API server nothing for them
	if opts.Client.Cache == nil {
		opts.Client.Cache = &ctrlclient.CacheOptions{}
	}
	opts.Client.Cache.Unstructured = true
	if !f.watch.AllNamespaces {
		opts.Cache.DefaultNamespaces = map[string]ctrlcache.Config{os.Getenv("RUNTIME_NAMESPACE"): {}}
	}
	cachestrip.Set(opts.Cache.ByObject)
	return opts
}
