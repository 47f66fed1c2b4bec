// Command devcluster runs a persistent local Flux dev cluster, built on test/fluxenv (the same
// code as the end-to-end tests): an envtest control plane (etcd + kube-apiserver on 127.0.0.1),
// the Flux CRDs and this project's CRDs (config/crd/bases), source-controller,
// kustomize-controller (--feature-gates=ExternalArtifact=true), image-reflector-controller (when
// `make testbin` built it), a Git server serving every directory of fixtures/ as <name>.git (push
// enabled), an OCI registry and an S3 server, a Prometheus scraping an exporter that plays the
// demo's dev stage (metrics.go; when `make prometheus` built it), and optionally this project's
// controller.
//
//	go run ./test/cmd/devcluster up [flags] start it in the background (idempotent) and print how to use it
//	go run ./test/cmd/devcluster status     show whether it runs, its addresses and processes
//	go run ./test/cmd/devcluster down       stop exactly what up started
//
// Flags of up:
//
//	--with-kcl-controller BINARY  also run BINARY (bin/kcl-artifact-controller) `run`, as admin,
//	                              its artifact storage in bin/dev-cluster/kcl-artifact-controller/
//	                              and its log in bin/dev-cluster/logs/kcl-artifact-controller.log
//	--brief                       print one line instead of the addresses and processes
//
// `up` starts a detached supervisor (this program re-executed with the hidden argument `serve`,
// in its own session, output in bin/dev-cluster/supervisor.log). The supervisor owns every
// process of the cluster (they die with it: Pdeathsig), writes bin/dev-cluster/state.json when
// the cluster is ready and stops everything on SIGTERM. `down` stops it and verifies that no
// process of its session is left.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/test/cmd/devcluster/devstate"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

const (
	upTimeout      = 6 * time.Minute  // for the supervisor to report ready
	downTimeout    = 2 * time.Minute  // for the supervisor to stop everything after SIGTERM
	childrenLinger = 15 * time.Second // for its children to disappear after it exited
	kclName        = "kcl-artifact-controller"
)

type paths = devstate.Paths
type state = devstate.State

type upOptions struct {
	kclBinary string // absolute; "" = no kcl-artifact-controller
	brief     bool
}

func main() {
	log.SetFlags(0)
	if len(os.Args) < 2 {
		usage()
	}
	p, err := devstate.GetPaths()
	if err != nil {
		log.Fatalf("devcluster: %v", err)
	}
	cmd, args := os.Args[1], os.Args[2:]
	switch cmd {
	case "up", "serve":
		var o upOptions
		fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
		fs.StringVar(&o.kclBinary, "with-kcl-controller", "", "also run this kcl-artifact-controller binary")
		fs.BoolVar(&o.brief, "brief", false, "print one line instead of the addresses and processes")
		if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
			usage()
		}
		if o.kclBinary != "" {
			if o.kclBinary, err = filepath.Abs(o.kclBinary); err != nil {
				log.Fatalf("devcluster: %v", err)
			}
		}
		if cmd == "up" {
			err = up(p, o)
		} else {
			err = serve(p, o)
		}
	case "down", "status":
		if len(args) > 0 {
			usage()
		}
		if cmd == "down" {
			err = down(p)
		} else {
			err = status(p)
		}
	default:
		usage()
	}
	if err != nil {
		log.Fatalf("devcluster %s: %v", cmd, err)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: devcluster up [--with-kcl-controller BINARY] [--brief] | down | status")
	os.Exit(2)
}

// lock serialises up and down (and status) of concurrent invocations.
func lock(p paths) (func(), error) {
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p.Lock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

func up(p paths, o upOptions) error {
	unlock, err := lock(p)
	if err != nil {
		return err
	}
	defer unlock()

	if o.kclBinary != "" {
		if err := checkExecutable(o.kclBinary); err != nil {
			return fmt.Errorf("kcl-artifact-controller: %w (run `make build`)", err)
		}
	}
	if sup, alive := p.Supervisor(); alive {
		if st, err := p.ReadState(); err == nil && st.Supervisor.PID == sup.PID {
			if err := reusable(p, st, o); err != nil {
				return err
			}
			fmt.Printf("dev cluster already running (supervisor pid %d, ready since %s)\n", sup.PID, st.Ready.Format(time.RFC3339))
			if !o.brief {
				printInfo(p, st)
			}
			return nil
		}
		fmt.Printf("dev cluster is starting (supervisor pid %d); waiting for it\n", sup.PID)
		st, err := waitReady(p, sup)
		if err != nil {
			return err
		}
		if err := reusable(p, st, o); err != nil {
			return err
		}
		if !o.brief {
			printInfo(p, st)
		}
		return nil
	}

	// nothing runs: clear what a dead supervisor may have left, check the binaries, start one
	_ = os.Remove(p.State)
	_ = os.Remove(p.PIDFile)
	if _, err := fluxenv.LoadTestBin(); err != nil {
		return err
	}
	started := time.Now()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	logFile, err := os.OpenFile(p.SupervisorLog, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	args := []string{"serve"}
	if o.kclBinary != "" {
		args = append(args, "--with-kcl-controller", o.kclBinary)
	}
	cmd := exec.Command(exe, args...)
	cmd.Dir = p.Root
	cmd.Stdin = devnull
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// its own session: no terminal signals, and it outlives this command (no Pdeathsig)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the supervisor: %w", err)
	}
	sup := fluxenv.NewPIDInfo("supervisor", cmd.Process.Pid)
	// reap it if it dies while we wait, so it does not linger as a zombie of ours
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := writeJSON(p.PIDFile, sup); err != nil {
		_ = syscall.Kill(sup.PID, syscall.SIGTERM)
		return err
	}
	what := "the dev cluster"
	if o.kclBinary != "" {
		what += " with " + kclName
	}
	fmt.Printf("starting %s (supervisor pid %d, log %s)\n", what, sup.PID, p.Rel(p.SupervisorLog))
	st, err := waitReadyOrExit(p, sup, exited, started)
	if err != nil {
		return err
	}
	if !o.brief {
		printInfo(p, st)
	}
	return nil
}

// reusable tells whether the running cluster st is what o asks for, and healthy.
func reusable(p paths, st *state, o upOptions) error {
	restart := "stop it with `make demo-down` or `make dev-cluster-down` (both run go run ./test/cmd/devcluster down) and start again"
	if dead := st.Dead(); len(dead) > 0 {
		return fmt.Errorf("the dev cluster (supervisor pid %d) runs but these processes exited: %s (logs in %s/, %s); %s",
			st.Supervisor.PID, devstate.Describe(dead), p.Rel(st.LogDir), p.Rel(p.SupervisorLog), restart)
	}
	if o.kclBinary == "" {
		return nil
	}
	k := st.KCLController
	if k == nil {
		return fmt.Errorf("the dev cluster (supervisor pid %d) runs without %s (it was started by `make dev-cluster`); %s",
			st.Supervisor.PID, kclName, restart)
	}
	if k.Binary != o.kclBinary {
		return fmt.Errorf("the dev cluster runs %s from %s, not %s; %s", kclName, k.Binary, o.kclBinary, restart)
	}
	if sum, err := fileSHA256(o.kclBinary); err == nil && sum != k.BinarySHA256 {
		fmt.Printf("warning: %s changed since %s (pid %d) started from it; the running controller is the old build: "+
			"restart with `make demo-down` then `make demo` to use the new one\n", p.Rel(o.kclBinary), kclName, k.Process.PID)
	}
	return nil
}

func waitReady(p paths, sup fluxenv.PIDInfo) (*state, error) {
	return waitReadyOrExit(p, sup, nil, time.Now())
}

// waitReadyOrExit polls for the state file of supervisor sup, until upTimeout. exited, if not
// nil, reports the supervisor's exit (it is our child).
func waitReadyOrExit(p paths, sup fluxenv.PIDInfo, exited <-chan error, since time.Time) (*state, error) {
	deadline := time.Now().Add(upTimeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if st, err := p.ReadState(); err == nil && st.Supervisor.PID == sup.PID {
			fmt.Printf("dev cluster ready in %s\n", time.Since(since).Round(100*time.Millisecond))
			return st, nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("the supervisor exited (%v) before the cluster was ready; last lines of %s:\n%s",
				err, p.SupervisorLog, fluxenv.Tail(p.SupervisorLog, 40))
		case <-tick.C:
		}
		if exited == nil && !sup.Alive() {
			return nil, fmt.Errorf("the supervisor (pid %d) died before the cluster was ready; last lines of %s:\n%s",
				sup.PID, p.SupervisorLog, fluxenv.Tail(p.SupervisorLog, 40))
		}
		if time.Now().After(deadline) {
			stopErr := stopSupervisor(p, sup)
			return nil, fmt.Errorf("the cluster was not ready after %s (supervisor stopped: %v); last lines of %s:\n%s",
				upTimeout, stopErr, p.SupervisorLog, fluxenv.Tail(p.SupervisorLog, 40))
		}
	}
}

func down(p paths) error {
	unlock, err := lock(p)
	if err != nil {
		return err
	}
	defer unlock()
	sup, alive := p.Supervisor()
	if !alive {
		st, _ := p.ReadState()
		_ = os.Remove(p.State)
		_ = os.Remove(p.PIDFile)
		// its children die with it (Pdeathsig); make sure none survived a crash
		if st != nil {
			if left := stillRunning(st.Processes); len(left) > 0 {
				return fmt.Errorf("the supervisor is gone but these processes still run: %s", devstate.Describe(left))
			}
		}
		if sup.PID != 0 {
			if left := devstate.SessionMembers(sup.PID); len(left) > 0 {
				return fmt.Errorf("the supervisor (pid %d) is gone but processes of its session still run:\n  %s",
					sup.PID, strings.Join(left, "\n  "))
			}
		}
		fmt.Println("dev cluster is not running: nothing to stop")
		return nil
	}
	st, _ := p.ReadState()
	fmt.Printf("stopping the dev cluster (supervisor pid %d)\n", sup.PID)
	start := time.Now()
	if err := stopSupervisor(p, sup); err != nil {
		return err
	}
	// everything it started is in its session (it is the session leader): the recorded processes,
	// and what they started (KCL engine workers, git-http-backend)
	deadline := time.Now().Add(childrenLinger)
	var recorded []fluxenv.PIDInfo
	if st != nil {
		recorded = st.Processes
	}
	for (len(stillRunning(recorded)) > 0 || len(devstate.SessionMembers(sup.PID)) > 0) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // polling /proc
	}
	if left := stillRunning(recorded); len(left) > 0 {
		return fmt.Errorf("the supervisor exited but these processes still run: %s", devstate.Describe(left))
	}
	if left := devstate.SessionMembers(sup.PID); len(left) > 0 {
		return fmt.Errorf("the supervisor exited but processes of its session still run:\n  %s", strings.Join(left, "\n  "))
	}
	_ = os.Remove(p.State)
	_ = os.Remove(p.PIDFile)
	// The supervisor's parent is init, which reaps it (and orphaned KCL workers) when it gets to
	// it; give it a moment so that ps right after this shows no <defunct> entries. Cosmetic only.
	for reapBy := time.Now().Add(5 * time.Second); time.Now().Before(reapBy); {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", sup.PID)); err != nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling /proc
	}
	fmt.Printf("dev cluster stopped in %s: supervisor and %d processes gone (%s), none left in its session\n",
		time.Since(start).Round(100*time.Millisecond), len(recorded), devstate.Describe(recorded))
	return nil
}

// stopSupervisor sends SIGTERM to the supervisor and waits for it to exit; after downTimeout
// it is killed (its children then get SIGKILL through Pdeathsig).
func stopSupervisor(p paths, sup fluxenv.PIDInfo) error {
	if err := syscall.Kill(sup.PID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	deadline := time.Now().Add(downTimeout)
	for sup.Alive() {
		if time.Now().After(deadline) {
			_ = syscall.Kill(sup.PID, syscall.SIGKILL)
			return fmt.Errorf("the supervisor (pid %d) did not stop within %s of SIGTERM and was killed; see %s",
				sup.PID, downTimeout, p.SupervisorLog)
		}
		time.Sleep(100 * time.Millisecond) // polling /proc
	}
	return nil
}

func stillRunning(procs []fluxenv.PIDInfo) []fluxenv.PIDInfo {
	var out []fluxenv.PIDInfo
	for _, pr := range procs {
		if pr.Alive() {
			out = append(out, pr)
		}
	}
	return out
}

func status(p paths) error {
	sup, running := p.Supervisor()
	if !running {
		fmt.Println("dev cluster: not running (start it with `make dev-cluster` or `make demo`)")
		return nil
	}
	st, err := p.ReadState()
	if err != nil || st.Supervisor.PID != sup.PID {
		fmt.Printf("dev cluster: starting (supervisor pid %d, log %s)\n", sup.PID, p.Rel(p.SupervisorLog))
		return nil
	}
	fmt.Printf("dev cluster: running since %s (supervisor pid %d)\n", st.Ready.Format(time.RFC3339), sup.PID)
	printInfo(p, st)
	if dead := st.Dead(); len(dead) > 0 {
		return fmt.Errorf("not healthy: exited: %s (see %s)", devstate.Describe(dead), p.Rel(st.LogDir))
	}
	return nil
}

func printInfo(p paths, st *state) {
	fmt.Printf("\n  export KUBECONFIG=%s\n\n", st.Kubeconfig)
	fmt.Printf("  kube-apiserver:     %s\n", st.APIServer)
	fmt.Printf("  git URL base:       %s\n", st.GitURLBase)
	names := make([]string, 0, len(st.Repositories))
	for name := range st.Repositories {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Printf("    %-16s  %s\n", name, st.Repositories[name])
	}
	for _, name := range names {
		if a, ok := st.Artifacts[name]; ok {
			fmt.Printf("    %-16s  %s:%s (OCI, as flux push artifact)\n", name, a, devstate.FixtureTag)
		}
	}
	fmt.Printf("  S3 (generic):       %s bucket %s, <fixture>/ (access key %s)\n", st.S3.Endpoint, devstate.FixtureBucket, st.S3.AccessKey)
	fmt.Printf("  artifact storage:   http://%s (source-controller)\n", st.StorageAddr)
	switch {
	case st.Ports.ImageReflectorHealth != 0:
		fmt.Printf("  image registry:     127.0.0.1:%d/<repo> (plain HTTP: ImageRepository spec.insecure: true), scanned by image-reflector-controller\n",
			st.Ports.Registry)
	case st.ImageReflectorMissing != "":
		fmt.Printf("  image-reflector-controller: not running: %s\n", st.ImageReflectorMissing)
	}
	switch {
	case st.Metrics != nil:
		fmt.Printf("  prometheus:         %s, scraping %s (plays Deployment %s)\n", st.Metrics.PrometheusURL, st.Metrics.ExporterURL, devstate.PlayedDeployment)
	case st.MetricsMissing != "":
		fmt.Printf("  prometheus:         not running: %s\n", st.MetricsMissing)
	}
	if k := st.KCLController; k != nil {
		fmt.Printf("  artifact storage:   %s (%s, pid %d, %s)\n", k.ArtifactURL, kclName, k.Process.PID, p.Rel(k.Binary))
		fmt.Printf("  browser view:       %s/\n", k.UIURL)
	}
	for _, d := range st.CRDDirs {
		fmt.Printf("  CRDs from:          %s\n", p.Rel(d))
	}
	var procs []string
	for _, pr := range st.Processes {
		procs = append(procs, fmt.Sprintf("%s %d", pr.Name, pr.PID))
	}
	fmt.Printf("  processes:          %s\n", strings.Join(procs, ", "))
	fmt.Printf("  logs:               %s/, %s\n", p.Rel(st.LogDir), p.Rel(p.SupervisorLog))
	fmt.Printf("  stop it with:       make dev-cluster-down (go run ./test/cmd/devcluster down)\n")
}

// serve is the supervisor: it starts the cluster, writes the state file and blocks until
// SIGTERM or SIGINT, then stops everything.
func serve(p paths, o upOptions) error {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("supervisor: ")
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	signal.Ignore(syscall.SIGHUP)

	self := fluxenv.NewPIDInfo("supervisor", os.Getpid())
	var crdDirs []string
	if own := filepath.Join(p.Root, "config", "crd", "bases"); hasYAML(own) {
		crdDirs = append(crdDirs, own)
	}
	tb, err := fluxenv.LoadTestBin()
	if err != nil {
		return err
	}
	// a bin/ built before image-reflector-controller was part of testbin still makes a cluster;
	// status says why it does not run
	var irMissing string
	if err := tb.CheckImageReflector(); err != nil {
		irMissing = err.Error()
		log.Printf("not starting image-reflector-controller: %s", irMissing)
	}
	log.Printf("starting (pid %d, work dir %s)", self.PID, p.Dir)
	env, err := fluxenv.Start(ctx, fluxenv.Options{
		WorkDir:        p.Dir,
		KubeconfigPath: p.Kubeconfig,
		CRDDirs:        crdDirs,
		TestBin:        tb,
		ImageReflector: irMissing == "",
		Logf:           log.Printf,
	})
	if err != nil {
		return err
	}
	stop := func() error {
		log.Printf("stopping")
		start := time.Now()
		err := env.Stop()
		_ = os.Remove(p.State)
		_ = os.Remove(p.Kubeconfig)
		if err != nil {
			return err
		}
		log.Printf("stopped in %s; processes gone: %s", time.Since(start).Round(time.Millisecond), devstate.Describe(env.Processes()))
		return nil
	}

	repos, err := fixtureRepos(p, env)
	if err != nil {
		return errors.Join(err, stop())
	}
	artifacts, err := fixtureObjects(ctx, p, env, repos)
	if err != nil {
		return errors.Join(err, stop())
	}
	metrics, metricsMissing := startMetrics(ctx, env)
	if metricsMissing != "" {
		log.Printf("no Prometheus for spec.verify: %s", metricsMissing)
	}
	var kcl *devstate.KCLController
	if o.kclBinary != "" {
		if kcl, err = startKCLController(ctx, p, env, o.kclBinary); err != nil {
			return errors.Join(err, stop())
		}
	}
	st := state{
		Supervisor:    self,
		Processes:     env.Processes(),
		Kubeconfig:    env.KubeconfigPath,
		APIServer:     env.Config.Host,
		GitURLBase:    env.Git.URLBase,
		Repositories:  repos,
		Artifacts:     artifacts,
		S3:            devstate.S3{Endpoint: env.S3.Endpoint, AccessKey: env.S3.AccessKey, SecretKey: env.S3.SecretKey},
		StorageAddr:   env.StorageAddr,
		Ports:         env.Ports,
		CRDDirs:       append([]string{env.TestBin.FluxCRDsDir}, crdDirs...),
		LogDir:        env.LogDir,
		Ready:         time.Now(),
		KCLController: kcl,

		ImageReflectorMissing: irMissing,
		Metrics:               metrics,
		MetricsMissing:        metricsMissing,
	}
	if err := writeJSON(p.State, st); err != nil {
		return errors.Join(err, stop())
	}
	log.Printf("ready: %s", devstate.Describe(st.Processes))

	// report (and keep running) if a controller dies, so that status shows it
	watched := append([]*fluxenv.Process{env.SourceController, env.KustomizeController}, env.KCLControllerProcesses()...)
	if env.ImageReflectorController != nil {
		watched = append(watched, env.ImageReflectorController)
	}
	for _, pr := range watched {
		go func() {
			select {
			case <-pr.Done():
				_, err := pr.Exited()
				log.Printf("%s (pid %d) exited unexpectedly: %v; see %s", pr.Name, pr.PID(), err, pr.LogPath)
			case <-ctx.Done():
			}
		}()
	}
	<-ctx.Done()
	log.Printf("signal received")
	return stop()
}

// startKCLController runs binary `run` against the cluster, as admin, with a fresh artifact
// storage under bin/dev-cluster/ (the cluster's etcd is fresh too: old artifacts are garbage).
func startKCLController(ctx context.Context, p paths, env *fluxenv.Env, binary string) (*devstate.KCLController, error) {
	sum, err := fileSHA256(binary)
	if err != nil {
		return nil, err
	}
	storage := filepath.Join(p.Dir, kclName, "storage")
	if err := os.RemoveAll(storage); err != nil {
		return nil, err
	}
	log.Printf("starting %s (%s)", kclName, binary)
	start := time.Now()
	uiAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	c, err := env.StartKCLController(ctx, fluxenv.KCLControllerOptions{Binary: binary, Name: kclName, StorageDir: storage,
		// the demo's spec.verify reads the Prometheus of this machine: the network guard refuses
		// loopback unless allowed (a dev cluster's choice; a cluster allows its own Prometheus)
		Args: []string{"--ui-addr=" + uiAddr, "--kcl-deps-allowed-networks=127.0.0.1/32"}})
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", kclName, err)
	}
	log.Printf("%s (pid %d) ready in %s; artifact server %s", kclName, c.PID(), time.Since(start).Round(time.Millisecond), c.ArtifactURL())
	return &devstate.KCLController{
		Process:      fluxenv.NewPIDInfo(kclName, c.PID()),
		Binary:       binary,
		BinarySHA256: sum,
		ArtifactURL:  c.ArtifactURL(),
		UIURL:        "http://" + uiAddr,
		StorageDir:   c.StorageDir,
		LogPath:      c.LogPath,
	}, nil
}

// freeAddr is a free TCP address of 127.0.0.1.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// fixtureRepos creates <name>.git for every directory of fixtures/, and lets clients push to it
// over HTTP (the server listens on 127.0.0.1 only).
func fixtureRepos(p paths, env *fluxenv.Env) (map[string]string, error) {
	repos := map[string]string{}
	fixtures := filepath.Join(p.Root, "fixtures")
	entries, err := os.ReadDir(fixtures)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return repos, nil
		}
		return nil, err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		sha, err := env.Git.CreateRepo(e.Name(), filepath.Join(fixtures, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("fixture %s: %w", e.Name(), err)
		}
		cfg := exec.Command("git", "--git-dir="+env.Git.RepoPath(e.Name()), "config", "http.receivepack", "true")
		cfg.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull)
		if out, err := cfg.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("fixture %s: enabling push: %v: %s", e.Name(), err, out)
		}
		repos[e.Name()] = env.Git.URL(e.Name())
		log.Printf("repository %s from fixtures/%s at %s", env.Git.URL(e.Name()), e.Name(), sha)
	}
	return repos, nil
}

// fixtureObjects publishes every fixture as the other Flux sources see it: pushed to the OCI
// registry as `flux push artifact` does (fixtures/<name>:FixtureTag, with its Git URL and
// revision as origin), and copied into the S3 bucket FixtureBucket under <name>/.
func fixtureObjects(ctx context.Context, p paths, env *fluxenv.Env, repos map[string]string) (map[string]string, error) {
	if err := env.S3.CreateBucket(devstate.FixtureBucket); err != nil {
		return nil, err
	}
	artifacts := map[string]string{}
	for name, url := range repos {
		dir := filepath.Join(p.Root, "fixtures", name)
		rev, err := env.Git.Head(name)
		if err != nil {
			return nil, err
		}
		repo := "fixtures/" + name
		if _, err := env.Registry.PushArtifact(ctx, repo, devstate.FixtureTag, dir, url, fluxenv.DefaultBranch+"@sha1:"+rev); err != nil {
			return nil, fmt.Errorf("fixture %s: %w", name, err)
		}
		if err := env.S3.PutDir(devstate.FixtureBucket, name+"/", dir); err != nil {
			return nil, fmt.Errorf("fixture %s: %w", name, err)
		}
		artifacts[name] = env.Registry.URL(repo)
		log.Printf("fixtures/%s pushed to %s:%s and put in s3://%s/%s/", name, artifacts[name], devstate.FixtureTag, devstate.FixtureBucket, name)
	}
	return artifacts, nil
}

func hasYAML(dir string) bool {
	for _, pat := range []string{"*.yaml", "*.yml"} {
		if m, _ := filepath.Glob(filepath.Join(dir, pat)); len(m) > 0 {
			return true
		}
	}
	return false
}

func checkExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeJSON writes v to path atomically.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
