// Command bench is the scale harness of kcl-artifact-controller (`make bench-scale`): it
// starts the real local Flux environment of the end-to-end tests (test/fluxenv: envtest
// kube-apiserver and etcd, source-controller, kustomize-controller, a Git server) and
// bin/kcl-artifact-controller with its sandbox on, then, for each pass, times N KCLArtifacts
// spread over namespaces through three phases:
//
//   - create: N KCLArtifacts with distinct arguments, until all are Ready with an artifact;
//   - re-publish: a commit changes every output; from the moment the GitRepository shows the new
//     revision until every KCLArtifact is Ready at it (and, with generated Kustomizations, until
//     kustomize-controller applied every new artifact, reported on a row of its own);
//   - no-op: a reconcile request (reconcile.fluxcd.io/requestedAt) on every KCLArtifact, until
//     all handled it.
//
// Per phase it reports the wall time against a floor (renders × the warm render time measured
// in-process before the cluster work ÷ the controller's workers), the CPU of the controller and of
// its worker processes, worker starts, renders, API requests per reconcile, and peak memory. The
// table goes to stdout and bin/bench-scale.md.
//
//	go run ./test/bench [--n 1000] [--namespaces 10] [--passes disabled,enabled]
//	    [--controller-args '--kcl-workers=2 ...'] [--timeout 10m] [--keep]
//
// It needs the environment of `make test` (bin/testbin.env sourced, KCL_LIB and KCL_BINARY).
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/cli"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

const (
	controllerName = "kcl-artifact-controller"
	// passLabel marks the KCLArtifacts of a pass.
	passLabel = "bench-scale.kcl-flux.io/pass"
	// sourceName is the GitRepository of each pass, in its source namespace.
	sourceName = "bench"
	// sourcePollInterval is how often the GitRepository is read while waiting for a revision.
	sourcePollInterval = 50 * time.Millisecond
	// progressEvery bounds how often a wait prints its progress.
	progressEvery = 3 * time.Second
)

type config struct {
	n, namespaces      int
	controllerArgsRaw  string
	controllerArgs     []string
	controllerEnv      []string
	passes             []string
	keep               bool
	timeout            time.Duration
	workDir            string
	out                string
	workers            int
	floorWarmups       int
	floorRuns          int
	parallel           int
	poll               time.Duration
	settleTimeout      time.Duration
	settleQuietScrapes int
	compare            bool
	shapes             []string
	faults             bool
	noisy              bool
	victims            int
	attackNamespaces   []int
	converge           time.Duration
	shards             int
	roundRobin         bool
}

func main() {
	// The render floor's pool runs this executable as its worker.
	kclworker.ServeIfWorker()
	// The harness's watch cache logs only when it stops, at the end: nothing to show.
	ctrllog.SetLogger(logr.Discard())

	var cfg config
	var passes, shapes, controllerEnv, attackSpread string
	flag.IntVar(&cfg.n, "n", 1000, "KCLArtifacts per pass")
	flag.IntVar(&cfg.namespaces, "namespaces", 10, "namespaces the KCLArtifacts of a pass are spread over")
	flag.StringVar(&cfg.controllerArgsRaw, "controller-args", "", "extra flags of `kcl-artifact-controller run`, space-separated")
	flag.StringVar(&controllerEnv, "controller-env", "",
		"environment of the controller, space-separated KEY=VALUE (config/manager's is GOMEMLIMIT=320MiB)")
	flag.StringVar(&passes, "passes", "disabled,enabled",
		"passes, in order: 'disabled' (spec.kustomization.disabled: true) or 'enabled' (generated Kustomizations applied by kustomize-controller); each in fresh namespaces")
	flag.BoolVar(&cfg.compare, "compare", false,
		"compare with plain Flux instead of the passes: the same objects through Kustomizations and through KCLArtifacts, in each of --shapes (bin/bench-scale-compare.md)")
	flag.StringVar(&shapes, "shapes", shapePerApp+","+shapeGrouped,
		"shapes of --compare, in order: '"+shapePerApp+"' (a Kustomization or KCLArtifact per application) or '"+shapeGrouped+"' (one per namespace, for all its applications)")
	flag.BoolVar(&cfg.faults, "faults", false,
		"fault mode instead of the passes: N KCLArtifacts with generated Kustomizations through kills, wiped storage, killed workers and corrupted artifacts (bin/bench-scale-faults.md)")
	flag.BoolVar(&cfg.noisy, "noisy", false,
		"noisy-neighbour mode instead of the passes: victims' spec changes timed alone, then while an attacker namespace runs slow dependencies, endless renders, big outputs and tight intervals (bin/bench-noisy.md)")
	flag.IntVar(&cfg.victims, "victims", 50, "victim namespaces of --noisy, one KCLArtifact each")
	flag.StringVar(&attackSpread, "attack-namespaces", "1",
		"--noisy: the attacks are run once per entry, in order, the same objects dealt out over that many namespaces of one tenant (e.g. 1,2,5)")
	flag.DurationVar(&cfg.converge, "converge", 0,
		"--noisy: how long C may take to publish its latest argument after each attack (default the lesser of --timeout and 15m)")
	flag.IntVar(&cfg.shards, "shards", 1,
		"controller processes, each reconciling the KCLArtifacts of its shard (--watch-label-selector "+shardLabel+"=shard<i>); the passes only")
	flag.BoolVar(&cfg.roundRobin, "create-round-robin", false,
		"create the KCLArtifacts one namespace after the other in turn (the worst order for the render workers, one per namespace) instead of namespace by namespace, as kustomize-controller and kubectl apply a directory")
	flag.BoolVar(&cfg.keep, "keep", false, "leave the environment running at the end (until interrupted) and print its KUBECONFIG")
	flag.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "the longest each phase may take")
	flag.StringVar(&cfg.workDir, "workdir", "", "work directory of the environment (default: a new temporary directory, removed after a successful run)")
	flag.StringVar(&cfg.out, "out", "", "where to write the table (default <repo>/bin/bench-scale.md)")
	flag.IntVar(&cfg.floorWarmups, "floor-warmups", 5, "warm-up renders before the render floor is measured")
	flag.IntVar(&cfg.floorRuns, "floor-renders", 30, "renders timed for the render floor (median)")
	flag.DurationVar(&cfg.poll, "poll", time.Second,
		"how often the KCLArtifacts (and Kustomizations) are listed and the controller's processes sampled; listing 1000 objects costs the API server and the harness CPU")
	flag.IntVar(&cfg.parallel, "parallel", 8, "concurrent API calls of the harness when creating or annotating KCLArtifacts")
	flag.Parse()
	if flag.NArg() > 0 {
		fatalf("unexpected arguments %q", flag.Args())
	}
	if cfg.n <= 0 || cfg.namespaces <= 0 || cfg.parallel <= 0 || cfg.floorRuns <= 0 || cfg.floorWarmups < 0 || cfg.poll <= 0 || cfg.shards <= 0 || cfg.victims <= 0 {
		fatalf("--n, --namespaces, --parallel, --poll, --shards, --victims and --floor-renders must be positive")
	}
	if cfg.shards > 1 && (cfg.compare || cfg.faults || cfg.noisy) {
		fatalf("--shards applies to the passes, not to --compare, --faults or --noisy")
	}
	cfg.namespaces = min(cfg.namespaces, cfg.n)
	for p := range strings.SplitSeq(passes, ",") {
		p = strings.TrimSpace(p)
		if p != "disabled" && p != "enabled" {
			fatalf("--passes: %q is neither 'disabled' nor 'enabled'", p)
		}
		cfg.passes = append(cfg.passes, p)
	}
	for s := range strings.SplitSeq(shapes, ",") {
		s = strings.TrimSpace(s)
		if (s != shapePerApp && s != shapeGrouped) || slices.Contains(cfg.shapes, s) {
			fatalf("--shapes: %q is neither '%s' nor '%s', or given twice", s, shapePerApp, shapeGrouped)
		}
		cfg.shapes = append(cfg.shapes, s)
	}
	for f := range strings.SplitSeq(attackSpread, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || slices.Contains(cfg.attackNamespaces, n) {
			fatalf("--attack-namespaces: %q is not a positive number, or given twice", f)
		}
		cfg.attackNamespaces = append(cfg.attackNamespaces, n)
	}
	cfg.controllerArgs = strings.Fields(cfg.controllerArgsRaw)
	cfg.controllerEnv = strings.Fields(controllerEnv)
	if cfg.noisy {
		cfg.controllerArgs = append(append([]string{}, noisyControllerArgs...), cfg.controllerArgs...)
		cfg.controllerEnv = append(slices.Clone(noisyControllerEnv), cfg.controllerEnv...)
	}
	var err error
	if cfg.workers, err = kclWorkers(cfg.controllerArgs); err != nil {
		fatalf("--controller-args: %v", err)
	}
	cfg.settleTimeout = min(cfg.timeout, 3*time.Minute)
	cfg.settleQuietScrapes = 4

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "\nbench-scale: %v\n", err)
		os.Exit(1)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-scale: "+format+"\n", args...)
	os.Exit(2)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05.000 ")+format+"\n", args...)
}

// writeReport prints the table, the details per phase and the controller log's summary, and
// writes them to bin/bench-scale.md.
func (b *bench) writeReport() error {
	report, details, logSummary := b.report(), b.details(), b.controllerLogSummary()
	fmt.Printf("\n%s\n%s\n%s", report, details, logSummary)
	md := "# make bench-scale\n\n" + report + "\n" + details + "\n" + logSummary
	if err := os.MkdirAll(filepath.Dir(b.cfg.out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(b.cfg.out, []byte(md), 0o644); err != nil {
		return err
	}
	logf("bench-scale: table written to %s", b.cfg.out)
	return nil
}

// kclWorkers reads --kcl-workers from the controller's flags (default 2), the last one winning.
func kclWorkers(args []string) (int, error) {
	v, _ := cli.FlagValue(args, "kcl-workers")
	if v == "" {
		return kclworker.DefaultSize, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("--kcl-workers %q is not a positive number", v)
	}
	return n, nil
}

type bench struct {
	cfg    config
	ctx    context.Context
	root   string
	binary string
	// binaryInfo identifies the binary the controller was started from (it may be rebuilt
	// while the harness runs).
	binaryInfo string

	env *fluxenv.Env
	c   client.Client
	// watched reads KCLArtifacts and Kustomizations from a watch: polling them with a LIST of a
	// thousand objects every second would cost the API server more than the controller does.
	// The waits only read what they list, without copying it: copying ten thousand objects a
	// second took the harness 35 times its CPU at a thousand, on the cores it shares with what it
	// measures.
	watched client.Reader
	ctrl    *fluxenv.KCLController
	smp     *sampler
	// moreShards are the other controller processes of a sharded run (--shards).
	moreShards []controllerProc
	// cleanups run after the environment stopped, before its work directory is removed.
	cleanups []func()
	// others are the processes whose CPU the details report: the harness, the control plane,
	// the Flux controllers.
	others map[string]int

	warm      time.Duration
	goVersion string
	cpus      int
	commit    string

	results []phaseResult
}

// newBench finds the repository, the controller binary (KCL_BINARY or bin/) and the report's path.
func newBench(ctx context.Context, cfg config) (*bench, error) {
	root, err := fluxenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, ctx: ctx, root: root, goVersion: runtime.Version(), cpus: runtime.NumCPU()}
	b.commit = gitDescribe(root)
	b.binary = os.Getenv("KCL_BINARY")
	if b.binary == "" {
		b.binary = filepath.Join(root, "bin", controllerName)
	}
	if b.binary, err = filepath.Abs(b.binary); err != nil {
		return nil, err
	}
	if st, err := os.Stat(b.binary); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("controller binary %s is missing or not executable (make build, or set KCL_BINARY): %v", b.binary, err)
	}
	b.binaryInfo = describeBinary(b.binary)
	if cfg.out == "" {
		b.cfg.out = filepath.Join(root, "bin", "bench-scale.md")
	}
	return b, nil
}

func run(ctx context.Context, cfg config) (err error) {
	b, err := newBench(ctx, cfg)
	if err != nil {
		return err
	}
	root := b.root
	tb, err := fluxenv.LoadTestBin()
	if err != nil {
		return err
	}

	workDir := cfg.workDir
	removeWorkDir := false
	if workDir == "" {
		if workDir, err = os.MkdirTemp("", "bench-scale-"); err != nil {
			return err
		}
		removeWorkDir = true
	}
	logf("bench-scale: work dir %s; %d KCLArtifacts over %d namespaces per pass; passes %s; controller %s %s",
		workDir, cfg.n, cfg.namespaces, strings.Join(cfg.passes, ","), b.binary, cfg.controllerArgsRaw)

	// 1. the render floor, before anything else runs on the machine (--noisy compares victims
	// with themselves: no floor)
	if !cfg.noisy {
		if b.warm, err = measureFloor(ctx, filepath.Join(workDir, "floor"), cfg.floorWarmups, cfg.floorRuns, logf); err != nil {
			return fmt.Errorf("measuring the render floor: %w", err)
		}
	}

	// 2. the environment and the controller
	started := time.Now()
	env, err := fluxenv.Start(ctx, fluxenv.Options{
		WorkDir:     workDir,
		TestBin:     tb,
		CRDDirs:     []string{filepath.Join(root, "config", "crd", "bases")},
		AddToScheme: []func(*kruntime.Scheme) error{kclv1.AddToScheme},
		Logf:        logf,
	})
	if err != nil {
		return fmt.Errorf("starting the Flux environment: %w", err)
	}
	b.env, b.c = env, env.Client
	// The watch ends before the environment stops: kube-apiserver waits for open watches to end
	// when it shuts down, past envtest's patience.
	watchCtx, stopWatching := context.WithCancel(ctx)
	if b.watched, err = startWatching(watchCtx, env); err != nil {
		stopWatching()
		env.Stop()
		return err
	}
	failed := true
	defer func() {
		if failed {
			logf("bench-scale: logs of the environment:\n%s", env.LogTails(25))
		}
		stopWatching()
		if stopErr := env.Stop(); stopErr != nil {
			logf("bench-scale: stopping the environment: %v", stopErr)
			failed = true
		}
		for _, c := range b.cleanups {
			c()
		}
		if failed || cfg.keep || !removeWorkDir {
			logf("bench-scale: work dir and logs kept in %s", workDir)
		} else {
			os.RemoveAll(workDir)
			logf("bench-scale: work dir %s removed (--workdir DIR or --keep keeps it and its logs)", workDir)
		}
	}()
	if err := b.startControllers(ctx); err != nil {
		return err
	}
	for _, p := range b.procs() {
		logf("bench-scale: %s (pid %d, metrics %s) ready", p.ctrl.Name, p.ctrl.PID(), p.ctrl.MetricsURL())
	}
	logf("bench-scale: environment and %d controller process(es) ready in %s", cfg.shards, time.Since(started).Round(time.Millisecond))
	b.others = map[string]int{"harness": os.Getpid(), "source-controller": env.SourceController.PID(),
		"kustomize-controller": env.KustomizeController.PID()}
	for _, p := range env.Processes() {
		if p.Name == "etcd" || p.Name == "kube-apiserver" {
			b.others[p.Name] = p.PID
		}
	}
	samplerCtx, stopSampler := context.WithCancel(ctx)
	defer stopSampler()
	go b.sampleLoop(samplerCtx)

	// 3. the passes, or the comparison with plain Flux
	if cfg.compare || cfg.faults || cfg.noisy {
		run := b.runCompare
		if cfg.faults {
			run = b.runFaults
		}
		if cfg.noisy {
			run = b.runNoisy
		}
		if err := run(); err != nil {
			return err
		}
		failed = false
		return nil
	}
	for i, mode := range cfg.passes {
		if err := b.runPass(i+1, mode); err != nil {
			return fmt.Errorf("pass %d (%s): %w", i+1, mode, err)
		}
	}

	// 4. the report
	if err := b.writeReport(); err != nil {
		return err
	}
	failed = false

	if cfg.keep {
		fmt.Printf("\nThe environment keeps running (interrupt to stop it):\n  export KUBECONFIG=%s\n  logs: %s\n  controller metrics: %s\n",
			env.KubeconfigPath, env.LogDir, b.ctrl.MetricsURL())
		select {
		case <-ctx.Done():
		case <-b.ctrl.Done():
			logf("bench-scale: %s exited", controllerName)
		}
	}
	return nil
}

// describeBinary names a binary with its modification time and the start of its SHA-256.
func describeBinary(path string) string {
	info := path
	if st, err := os.Stat(path); err == nil {
		info += " built " + st.ModTime().UTC().Format(time.RFC3339)
	}
	if f, err := os.Open(path); err == nil {
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err == nil {
			info += fmt.Sprintf(" sha256 %x", h.Sum(nil)[:6])
		}
	}
	return info
}

func gitDescribe(root string) string {
	cmd := exec.Command("git", "describe", "--tags", "--always", "--dirty")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// sampleLoop samples the controller's processes every poll, for the peak worker RSS.
func (b *bench) sampleLoop(ctx context.Context) {
	t := time.NewTicker(b.cfg.poll)
	defer t.Stop()
	for {
		for _, p := range b.procs() {
			_, _ = p.smp.snapshot()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pass is one pass: its namespaces, source and KCLArtifacts.
type pass struct {
	id, mode, label string
	disabled        bool
	srcNS, repo     string
	namespaces      []string
	objects         []types.NamespacedName
	version         int
}

func (b *bench) runPass(idx int, mode string) error {
	p, err := b.setupPass(idx, mode)
	if err != nil {
		return err
	}
	// (a) create
	if err := b.phaseCreate(p); err != nil {
		return err
	}
	b.settle("after create")
	// (b) re-publish
	if err := b.phaseRepublish(p); err != nil {
		return err
	}
	b.settle("after re-publish")
	// (c) no-op
	if err := b.phaseNoop(p); err != nil {
		return err
	}
	b.settle("after no-op")
	return nil
}

// setupPass creates a pass's namespaces, repository and GitRepository.
func (b *bench) setupPass(idx int, mode string) (*pass, error) {
	p := &pass{id: fmt.Sprintf("p%d", idx), mode: mode, label: fmt.Sprintf("%d %s", idx, mode), disabled: mode == "disabled"}
	p.srcNS = fmt.Sprintf("bench-p%d-src", idx)
	p.repo = fmt.Sprintf("bench-p%d", idx)
	for i := range b.cfg.namespaces {
		p.namespaces = append(p.namespaces, fmt.Sprintf("bench-p%d-%02d", idx, i))
	}
	for i := range b.cfg.n {
		p.objects = append(p.objects, types.NamespacedName{Namespace: p.namespaces[i%len(p.namespaces)], Name: fmt.Sprintf("app-%04d", i)})
	}
	logf("== pass %s: %d KCLArtifacts in %s..%s, source %s/%s", p.label, b.cfg.n, p.namespaces[0],
		p.namespaces[len(p.namespaces)-1], p.srcNS, sourceName)

	// setup: namespaces, repository, GitRepository
	for _, ns := range append([]string{p.srcNS}, p.namespaces...) {
		if err := b.c.Create(b.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	p.version = 1
	dir, err := os.MkdirTemp("", "bench-scale-repo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.k"), []byte(program("1")), 0o644); err != nil {
		return nil, err
	}
	sha, err := b.env.Git.CreateRepo(p.repo, dir)
	if err != nil {
		return nil, err
	}
	rev := gitRevision(sha)
	gr := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: sourceName, Namespace: p.srcNS},
		Spec: sourcev1.GitRepositorySpec{
			URL:       b.env.Git.URL(p.repo),
			Interval:  metav1.Duration{Duration: time.Hour},
			Timeout:   &metav1.Duration{Duration: time.Minute},
			Reference: &sourcev1.GitRepositoryRef{Branch: fluxenv.DefaultBranch},
		},
	}
	if err := b.c.Create(b.ctx, gr); err != nil {
		return nil, fmt.Errorf("creating GitRepository: %w", err)
	}
	if _, err := b.waitSourceRevision(p, rev); err != nil {
		return nil, err
	}
	b.settle("before " + p.label)
	return p, nil
}

func gitRevision(sha string) string { return fluxenv.DefaultBranch + "@sha1:" + sha }

// mark is the state of the measured things at one moment.
type mark struct {
	at      time.Time
	metrics scrape // summed over the controller processes
	// per controller process (one per shard)
	shards []scrape
	cpu    []cpuSnap
	hwm    []uint64
	others map[string]uint64
	// machine is the busy time of every CPU of the machine (/proc/stat), in ticks: what the
	// measured processes used and what anything else on the machine did meanwhile
	machine uint64
}

// mark reads the processes' CPU and the controller's metrics. Scraping a thousand objects'
// metrics costs the controller tens of milliseconds: the CPU is read after the scrape at the
// start of a phase and before it at the end, so that no phase pays for the harness's scrapes.
func (b *bench) mark(starting bool) (mark, error) {
	m := mark{at: time.Now()}
	var err error
	if !starting {
		err = b.snapshotCPU(&m)
	}
	if err == nil {
		for _, p := range b.procs() {
			s, err := scrapeMetrics(b.ctx, p.ctrl.MetricsURL())
			if err != nil {
				return m, fmt.Errorf("the metrics of %s: %w", p.ctrl.Name, err)
			}
			m.shards = append(m.shards, s)
		}
		m.metrics = mergeScrapes(m.shards)
	}
	if err == nil && starting {
		err = b.snapshotCPU(&m)
	}
	return m, err
}

func (b *bench) snapshotCPU(m *mark) error {
	m.cpu, m.hwm = nil, nil
	for _, p := range b.procs() {
		snap, err := p.smp.snapshot()
		if err != nil {
			return err
		}
		m.cpu = append(m.cpu, snap)
		m.hwm = append(m.hwm, p.smp.controllerHWM())
	}
	m.others = otherCPU(b.others)
	m.machine = machineBusyTicks()
	return nil
}

// begin starts measuring a phase.
func (b *bench) begin() (mark, error) {
	for _, p := range b.procs() {
		p.smp.reset()
	}
	return b.mark(true)
}

// result measures a phase that began at start; its wall time runs from t0 to done.
func (b *bench) result(p *pass, phase string, start mark, t0, done time.Time, expectedRenders int) (phaseResult, error) {
	end, err := b.mark(false)
	if err != nil {
		return phaseResult{}, err
	}
	r := phaseResult{pass: p.label, phase: phase, n: b.cfg.n, wall: done.Sub(t0)}
	r.renders, r.rendersOK = delta(start.metrics, end.metrics, mRenders, nil)
	renders := r.renders
	if !r.rendersOK {
		renders, r.floorEstimated = float64(expectedRenders), true
	}
	r.floor = time.Duration(renders * float64(b.warm) / float64(b.cfg.workers))
	for i := range end.cpu {
		r.ctrlCPU += ticksToDuration(end.cpu[i].ctrl.CPU() - start.cpu[i].ctrl.CPU())
		r.workerCPU += ticksToDuration(workerTicks(start.cpu[i], end.cpu[i]))
		r.ctrlHWM = max(r.ctrlHWM, end.hwm[i])
	}
	r.workerStarts, r.workerStartsOK = delta(start.metrics, end.metrics, mWorkerStarts, nil)
	var ok1, ok2 bool
	r.apiRequests, ok1 = delta(start.metrics, end.metrics, mRESTRequests, nil)
	r.reconciles, ok2 = delta(start.metrics, end.metrics, mReconciles, map[string]string{"controller": "kclartifact"})
	r.apiOK = ok1 && ok2
	for _, p := range b.procs() {
		peak, seen := p.smp.peaks()
		r.workerPeak, r.workersSeen = max(r.workerPeak, peak), r.workersSeen+seen
		anon, all := p.smp.anonPeaks()
		r.workerAnon, r.workersAnon = max(r.workerAnon, anon), r.workersAnon+all
	}

	var d []string
	d = append(d, fmt.Sprintf("reconciles %.0f (%s)", r.reconciles,
		deltaByLabel(start.metrics, end.metrics, mReconciles, "result")))
	d = append(d, fmt.Sprintf("API requests %.0f", r.apiRequests))
	d = append(d, "renders "+deltaByLabel(start.metrics, end.metrics, mRenders, "result"))
	if n, ok := delta(start.metrics, end.metrics, mRenderDuration+"_count", nil); ok && n > 0 {
		s, _ := delta(start.metrics, end.metrics, mRenderDuration+"_sum", nil)
		d = append(d, fmt.Sprintf("mean render %s (controller histogram)", fmtDur3(time.Duration(s/n*float64(time.Second)))))
	} else {
		d = append(d, "mean render n/a")
	}
	d = append(d, "worker kills "+deltaByLabel(start.metrics, end.metrics, mWorkerKills, "reason"))
	if v, ok := delta(start.metrics, end.metrics, mColdStarts, nil); ok {
		d = append(d, fmt.Sprintf("sandbox cold starts %.0f", v))
	} else {
		d = append(d, "sandbox cold starts n/a")
	}
	d = append(d, "source cache "+deltaByLabel(start.metrics, end.metrics, mSourceCache, "result"))
	d = append(d, "dependency cache "+deltaByLabel(start.metrics, end.metrics, mDepCache, "result"))
	if v, ok := delta(start.metrics, end.metrics, mOutputBytes, nil); ok {
		d = append(d, fmt.Sprintf("output %.0f kB", v/(1<<10)))
	} else {
		d = append(d, "output n/a")
	}
	d = append(d, fmt.Sprintf("new worker processes seen %d", r.workersSeen))
	d = append(d, fmt.Sprintf("workers' RssAnon together at most %.0f MB (sampled)", mb(r.workersAnon)))
	var cpus []string
	cpus = append(cpus, fmt.Sprintf("controller %.1f", r.ctrlCPU.Seconds()), fmt.Sprintf("workers %.1f", r.workerCPU.Seconds()))
	names := make([]string, 0, len(end.others))
	for n := range end.others {
		names = append(names, n)
	}
	sort.Strings(names)
	listed := r.ctrlCPU + r.workerCPU
	for _, n := range names {
		cpus = append(cpus, fmt.Sprintf("%s %.1f", n, ticksToDuration(end.others[n]-start.others[n]).Seconds()))
		listed += ticksToDuration(end.others[n] - start.others[n])
	}
	if start.machine > 0 && end.machine > start.machine {
		// a core busy with anything else (another build or test on the machine) slows the phase
		busy := ticksToDuration(end.machine - start.machine)
		cpus = append(cpus, fmt.Sprintf("machine busy %.1f of %.1f, of which not the processes above %.1f",
			busy.Seconds(), end.at.Sub(start.at).Seconds()*float64(b.cpus), max(busy-listed, 0).Seconds()))
	}
	d = append(d, fmt.Sprintf("CPU over %s: %s", fmtDur(end.at.Sub(start.at)), strings.Join(cpus, ", ")))
	if s := shardDetails(start, end); s != "" {
		d = append(d, s)
	}
	r.detail = strings.Join(d, "; ")

	b.results = append(b.results, r)
	row := r.row()
	logf("   %s: wall %s (floor %s, %s), ctrl CPU/obj %s ms, worker CPU %s s, worker starts %s, renders %s, API req/reconcile %s, ctrl peak RSS %s MB, worker peak RSS %s MB (anon %s MB)",
		row[0], row[2], row[3], row[4], row[5], row[6], row[7], row[8], row[9], row[10], row[11], row[12])
	logf("   %s", r.detail)
	return r, nil
}

// phaseCreate creates the KCLArtifacts and waits until all are Ready with an artifact (and, with
// generated Kustomizations, until kustomize-controller applied each).
func (b *bench) phaseCreate(p *pass) error {
	logf("-- %s / create: %d KCLArtifacts", p.label, len(p.objects))
	start, err := b.begin()
	if err != nil {
		return err
	}
	order := b.createOrder(p)
	t0 := time.Now()
	err = b.parallel(len(p.objects), func(j int) error {
		i := order[j]
		key := p.objects[i]
		labels := map[string]string{passLabel: p.id}
		if b.cfg.shards > 1 {
			labels[shardLabel] = shardOf(i, b.cfg.shards)
		}
		obj := &kclv1.KCLArtifact{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: labels},
			Spec: kclv1.KCLArtifactSpec{
				SourceRef: kclv1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: sourceName, Namespace: p.srcNS},
				// nothing periodic during the run: every render is one the harness asked for
				Interval:      metav1.Duration{Duration: time.Hour},
				RetryInterval: &metav1.Duration{Duration: 10 * time.Second},
				Arguments: map[string]string{"name": key.Name, "namespace": key.Namespace,
					"replicas": strconv.Itoa(i%5 + 1)},
				Kustomization: &kclv1.KustomizationTemplate{Disabled: p.disabled},
			},
		}
		if err := b.c.Create(b.ctx, obj); err != nil {
			return fmt.Errorf("creating KCLArtifact %s: %w", key, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	logf("   created %d KCLArtifacts in %s", len(p.objects), time.Since(t0).Round(time.Millisecond))
	return b.finish(p, "create", start, t0, func(o *kclv1.KCLArtifact) bool {
		return isReady(o) && o.Status.Artifact != nil
	})
}

// createOrder is the order the KCLArtifacts of a pass are created in: namespace by namespace, as
// a Kustomization or `kubectl apply` creates a directory's objects (sorted), or with
// --create-round-robin one namespace after the other in turn.
func (b *bench) createOrder(p *pass) []int {
	order := make([]int, len(p.objects))
	for i := range order {
		order[i] = i
	}
	if !b.cfg.roundRobin {
		slices.SortStableFunc(order, func(x, y int) int {
			return strings.Compare(p.objects[x].Namespace, p.objects[y].Namespace)
		})
	}
	return order
}

// finish waits until every KCLArtifact of the pass satisfies ready and records the phase; with
// generated Kustomizations, it then waits until they applied and records that too.
func (b *bench) finish(p *pass, phase string, start mark, t0 time.Time, ready func(*kclv1.KCLArtifact) bool) error {
	done, err := b.waitArtifacts(p, phase, ready)
	if err != nil {
		return err
	}
	if _, err := b.result(p, phase, start, t0, done, len(p.objects)); err != nil {
		return err
	}
	if p.disabled {
		return nil
	}
	if done, err = b.waitApplied(p, phase+" → applied"); err != nil {
		return err
	}
	_, err = b.result(p, phase+" → applied", start, t0, done, len(p.objects))
	return err
}

// phaseRepublish commits a change of every output, asks source-controller to reconcile, and times
// from the new revision on the GitRepository until every KCLArtifact is Ready at it (and applied).
func (b *bench) phaseRepublish(p *pass) error {
	p.version++
	logf("-- %s / re-publish: commit version %d", p.label, p.version)
	start, err := b.begin()
	if err != nil {
		return err
	}
	sha, err := b.env.Git.CommitFiles(p.repo, fmt.Sprintf("version %d", p.version),
		map[string]string{"main.k": program(strconv.Itoa(p.version))})
	if err != nil {
		return err
	}
	rev := gitRevision(sha)
	if err := b.requestReconcile(&sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Name: sourceName, Namespace: p.srcNS}}); err != nil {
		return fmt.Errorf("requesting a reconcile of the GitRepository: %w", err)
	}
	t0, err := b.waitSourceRevision(p, rev)
	if err != nil {
		return err
	}
	logf("   GitRepository at %s after %s", rev, t0.Sub(start.at).Round(time.Millisecond))
	return b.finish(p, "re-publish", start, t0, func(o *kclv1.KCLArtifact) bool {
		return isReady(o) && o.Status.Artifact != nil && o.Status.SourceRevision == rev
	})
}

// phaseNoop asks every KCLArtifact to reconcile with nothing changed.
func (b *bench) phaseNoop(p *pass) error {
	token := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 10)
	logf("-- %s / no-op: %s=%s on every KCLArtifact", p.label, meta.ReconcileRequestAnnotation, token)
	start, err := b.begin()
	if err != nil {
		return err
	}
	t0 := time.Now()
	err = b.parallel(len(p.objects), func(i int) error {
		key := p.objects[i]
		return b.annotate(&kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}, token)
	})
	if err != nil {
		return err
	}
	logf("   annotated %d KCLArtifacts in %s", len(p.objects), time.Since(t0).Round(time.Millisecond))
	done, err := b.waitArtifacts(p, "no-op", func(o *kclv1.KCLArtifact) bool {
		return o.Status.LastHandledReconcileAt == token
	})
	if err != nil {
		return err
	}
	_, err = b.result(p, "no-op", start, t0, done, 0)
	return err
}

func isReady(o *kclv1.KCLArtifact) bool {
	c := apimeta.FindStatusCondition(o.Status.Conditions, meta.ReadyCondition)
	return c != nil && c.Status == metav1.ConditionTrue
}

func (b *bench) requestReconcile(obj client.Object) error {
	return b.annotate(obj, time.Now().Format(time.RFC3339Nano))
}

func (b *bench) annotate(obj client.Object, token string) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, meta.ReconcileRequestAnnotation, token)
	if err := b.c.Patch(b.ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		return fmt.Errorf("annotating %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// parallel runs f(0..n-1) on cfg.parallel goroutines; the first error stops the rest.
func (b *bench) parallel(n int, f func(i int) error) error {
	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range b.cfg.parallel {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					cancel()
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil && b.ctx.Err() != nil {
		first = b.ctx.Err()
	}
	return first
}

// poll calls cond every interval until it is done, printing its progress now and then; it
// returns the moment cond was first seen done. On timeout the error has the last progress.
func (b *bench) poll(what string, interval, timeout time.Duration, cond func(ctx context.Context) (bool, string, error)) (time.Time, error) {
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	began := time.Now()
	lastPrint := began
	last := "(not checked)"
	for {
		done, state, err := cond(ctx)
		now := time.Now()
		if err != nil {
			state = "error: " + err.Error()
		}
		if done && err == nil {
			return now, nil
		}
		last = state
		if now.Sub(lastPrint) >= progressEvery {
			logf("   %s: %s (%s)", what, state, now.Sub(began).Round(time.Second))
			lastPrint = now
		}
		for _, p := range b.procs() {
			if exited, werr := p.ctrl.Exited(); exited {
				return now, fmt.Errorf("%s exited (%v) while waiting for %s; last state: %s\n--- last 40 lines of %s:\n%s",
					p.ctrl.Name, werr, what, last, p.ctrl.LogPath, fluxenv.Tail(p.ctrl.LogPath, 40))
			}
		}
		select {
		case <-ctx.Done():
			if b.ctx.Err() != nil {
				return now, b.ctx.Err()
			}
			return now, fmt.Errorf("timed out after %s waiting for %s; last state: %s\n--- last 30 lines of %s:\n%s",
				timeout, what, last, b.ctrl.LogPath, fluxenv.Tail(b.ctrl.LogPath, 30))
		case <-t.C:
		}
	}
}

// waitSourceRevision waits until the pass's GitRepository has an artifact at rev, and returns
// when it was seen.
func (b *bench) waitSourceRevision(p *pass, rev string) (time.Time, error) {
	return b.poll(fmt.Sprintf("GitRepository %s/%s at %s", p.srcNS, sourceName, rev), sourcePollInterval, b.cfg.timeout,
		func(ctx context.Context) (bool, string, error) {
			var gr sourcev1.GitRepository
			if err := b.c.Get(ctx, client.ObjectKey{Namespace: p.srcNS, Name: sourceName}, &gr); err != nil {
				return false, "", err
			}
			got := "no artifact"
			if a := gr.Status.Artifact; a != nil {
				got = "artifact " + a.Revision
				if a.Revision == rev {
					return true, "", nil
				}
			}
			ready := apimeta.FindStatusCondition(gr.Status.Conditions, meta.ReadyCondition)
			if ready != nil {
				got += fmt.Sprintf("; Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
			}
			return false, got, nil
		})
}

// waitArtifacts lists the pass's KCLArtifacts every poll until ok holds for all of them.
func (b *bench) waitArtifacts(p *pass, phase string, ok func(*kclv1.KCLArtifact) bool) (time.Time, error) {
	return b.poll(p.label+" / "+phase, b.cfg.poll, b.cfg.timeout, func(ctx context.Context) (bool, string, error) {
		var list kclv1.KCLArtifactList
		if err := b.watched.List(ctx, &list, client.MatchingLabels{passLabel: p.id}, client.UnsafeDisableDeepCopy); err != nil {
			return false, "", err
		}
		n := 0
		states := map[string]int{}
		example := ""
		for i := range list.Items {
			o := &list.Items[i]
			if ok(o) {
				n++
				continue
			}
			c := apimeta.FindStatusCondition(o.Status.Conditions, meta.ReadyCondition)
			switch {
			case c == nil:
				states["no Ready condition"]++
			default:
				states[fmt.Sprintf("Ready=%s %s", c.Status, c.Reason)]++
				if c.Status == metav1.ConditionFalse && c.Reason != meta.ProgressingReason && example == "" {
					example = fmt.Sprintf("; e.g. %s/%s: %s", o.Namespace, o.Name, firstLine(c.Message))
				}
			}
		}
		return n == len(p.objects) && len(list.Items) == len(p.objects),
			fmt.Sprintf("%d/%d done; others: %s%s", n, len(p.objects), countsString(states), example), nil
	})
}

// waitApplied waits until every generated Kustomization of the pass applied its KCLArtifact's
// current artifact revision.
func (b *bench) waitApplied(p *pass, phase string) (time.Time, error) {
	inPass := map[string]bool{}
	for _, ns := range p.namespaces {
		inPass[ns] = true
	}
	return b.poll(p.label+" / "+phase, b.cfg.poll, b.cfg.timeout, func(ctx context.Context) (bool, string, error) {
		var arts kclv1.KCLArtifactList
		if err := b.watched.List(ctx, &arts, client.MatchingLabels{passLabel: p.id}, client.UnsafeDisableDeepCopy); err != nil {
			return false, "", err
		}
		var kss kustomizev1.KustomizationList
		if err := b.watched.List(ctx, &kss, client.UnsafeDisableDeepCopy); err != nil {
			return false, "", err
		}
		byKey := map[string]*kustomizev1.Kustomization{}
		for i := range kss.Items {
			ks := &kss.Items[i]
			if inPass[ks.Namespace] {
				byKey[ks.Namespace+"/"+ks.Name] = ks
			}
		}
		n := 0
		states := map[string]int{}
		example := ""
		for i := range arts.Items {
			o := &arts.Items[i]
			ks := byKey[o.Namespace+"/"+o.Name]
			switch {
			case o.Status.Artifact == nil:
				states["no artifact"]++
			case ks == nil:
				states["no Kustomization"]++
			case ks.Status.LastAppliedRevision == o.Status.Artifact.Revision:
				n++
			default:
				c := apimeta.FindStatusCondition(ks.Status.Conditions, meta.ReadyCondition)
				if c == nil {
					states["Kustomization without Ready"]++
				} else {
					states[fmt.Sprintf("Kustomization Ready=%s %s", c.Status, c.Reason)]++
					if c.Status == metav1.ConditionFalse && c.Reason != meta.ProgressingReason && example == "" {
						example = fmt.Sprintf("; e.g. %s/%s: %s", ks.Namespace, ks.Name, firstLine(c.Message))
					}
				}
			}
		}
		return n == len(p.objects) && len(arts.Items) == len(p.objects),
			fmt.Sprintf("%d/%d applied; others: %s%s", n, len(p.objects), countsString(states), example), nil
	})
}

func countsString(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// settle waits until the controller (and kustomize-controller) are idle: nothing queued, no
// reconcile running, and reconcile counts unchanged over several scrapes; so that a phase does
// not measure the tail of the previous one. A controller that does not settle is reported and
// the run goes on.
func (b *bench) settle(what string) {
	kustomizeURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", b.env.Ports.KustomizeMetrics)
	var prev [2]float64
	quiet := 0
	began := time.Now()
	_, err := b.poll("settling "+what, 500*time.Millisecond, b.cfg.settleTimeout, func(ctx context.Context) (bool, string, error) {
		var shards []scrape
		for _, p := range b.procs() {
			s, err := scrapeMetrics(ctx, p.ctrl.MetricsURL())
			if err != nil {
				return false, "", err
			}
			shards = append(shards, s)
		}
		kz, err := scrapeMetrics(ctx, kustomizeURL)
		if err != nil {
			return false, "", err
		}
		km := mergeScrapes(shards)
		r1, _ := km.sum(mReconciles, map[string]string{"controller": "kclartifact"})
		r2, _ := kz.sum(mReconciles, map[string]string{"controller": "kustomization"})
		idle := kz.idle("kustomization")
		for _, s := range shards {
			idle = idle && s.idle("kclartifact")
		}
		if idle && r1 == prev[0] && r2 == prev[1] {
			quiet++
		} else {
			quiet = 0
		}
		prev = [2]float64{r1, r2}
		return quiet >= b.cfg.settleQuietScrapes, fmt.Sprintf("kclartifact reconciles %.0f, kustomization reconciles %.0f", r1, r2), nil
	})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return
		}
		logf("   WARNING: not settled %s: %v", what, firstLine(err.Error()))
		return
	}
	logf("   settled %s in %s", what, time.Since(began).Round(time.Millisecond))
}

// controllerLogSummary counts the errors the controllers logged, with a few examples.
func (b *bench) controllerLogSummary() string {
	var s strings.Builder
	for _, p := range b.procs() {
		s.WriteString(logSummary(p.ctrl.LogPath))
	}
	return s.String()
}

func logSummary(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("Controller log: cannot read %s: %v\n", path, err)
	}
	count := 0
	var examples []string
	seen := map[string]bool{}
	for line := range strings.SplitSeq(string(data), "\n") {
		if !strings.Contains(line, "\tERROR\t") && !strings.Contains(line, "\terror\t") {
			continue
		}
		count++
		// the message without the timestamp, to list distinct ones
		f := strings.SplitN(line, "\t", 3)
		key := line
		if len(f) == 3 {
			key = f[2]
		}
		key = firstLine(key)
		if !seen[key] && len(examples) < 5 {
			seen[key] = true
			examples = append(examples, key)
		}
	}
	var s strings.Builder
	fmt.Fprintf(&s, "Controller log: %d error lines in %s\n", count, path)
	for _, e := range examples {
		fmt.Fprintf(&s, "  %s\n", e)
	}
	return s.String()
}

// startWatching starts an informer cache of KCLArtifacts and Kustomizations, stopped with ctx.
// Its watches come uncompressed, as the controller's do: the API server would otherwise gzip
// every event for the harness too, on the two cores the measured processes share.
func startWatching(ctx context.Context, env *fluxenv.Env) (client.Reader, error) {
	cfg := rest.CopyConfig(env.Config)
	cfg.DisableCompression = true
	c, err := cache.New(cfg, cache.Options{Scheme: env.Scheme, DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return nil, err
	}
	for _, obj := range []client.Object{&kclv1.KCLArtifact{}, &kustomizev1.Kustomization{}, &sourcev1.GitRepository{}} {
		if _, err := c.GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("watching %T: %w", obj, err)
		}
	}
	go func() {
		if err := c.Start(ctx); err != nil {
			logf("bench-scale: the watch cache stopped: %v", err)
		}
	}()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("the watch cache did not sync")
	}
	return c, nil
}
