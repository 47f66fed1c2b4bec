// Command devcluster runs a persistent local Flux dev cluster, built on test/fluxenv (the same
// code as the end-to-end tests): an envtest control plane (etcd + kube-apiserver on 127.0.0.1),
// the Flux CRDs and this project's CRDs (config/crd/bases), source-controller,
// kustomize-controller (--feature-gates=ExternalArtifact=true) and a Git server serving every
// directory of fixtures/ as <name>.git.
//
//	go run ./hack/devcluster up      start it in the background (idempotent) and print how to use it
//	go run ./hack/devcluster status  show whether it runs, its addresses and processes
//	go run ./hack/devcluster down    stop exactly what up started
//
// `up` starts a detached supervisor (this program re-executed with the hidden argument `serve`,
// in its own session, output in bin/dev-cluster/supervisor.log). The supervisor owns every
// process of the cluster (they die with it: Pdeathsig), writes bin/dev-cluster/state.json when
// the cluster is ready and stops everything on SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

const (
	upTimeout      = 5 * time.Minute  // for the supervisor to report ready
	downTimeout    = 2 * time.Minute  // for the supervisor to stop everything after SIGTERM
	childrenLinger = 15 * time.Second // for its children to disappear after it exited
)

// state is written by the supervisor to bin/dev-cluster/state.json once the cluster is ready.
type state struct {
	Supervisor   fluxenv.PIDInfo   `json:"supervisor"`
	Processes    []fluxenv.PIDInfo `json:"processes"`
	Kubeconfig   string            `json:"kubeconfig"`
	APIServer    string            `json:"apiServer"`
	GitURLBase   string            `json:"gitURLBase"`
	Repositories map[string]string `json:"repositories"` // name -> clone URL
	StorageAddr  string            `json:"storageAddr"`
	Ports        fluxenv.Ports     `json:"ports"`
	CRDDirs      []string          `json:"crdDirs"`
	LogDir       string            `json:"logDir"`
	Ready        time.Time         `json:"ready"`
}

type paths struct {
	root, dir, kubeconfig, state, pidFile, supervisorLog, lock string
}

func main() {
	log.SetFlags(0)
	if len(os.Args) != 2 {
		usage()
	}
	p, err := getPaths()
	if err != nil {
		log.Fatalf("devcluster: %v", err)
	}
	switch os.Args[1] {
	case "up":
		err = up(p)
	case "down":
		err = down(p)
	case "status":
		err = status(p)
	case "serve":
		err = serve(p)
	default:
		usage()
	}
	if err != nil {
		log.Fatalf("devcluster %s: %v", os.Args[1], err)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: devcluster up|down|status")
	os.Exit(2)
}

func getPaths() (paths, error) {
	root, err := fluxenv.RepoRoot()
	if err != nil {
		return paths{}, err
	}
	dir := filepath.Join(root, "bin", "dev-cluster")
	return paths{
		root:          root,
		dir:           dir,
		kubeconfig:    filepath.Join(dir, "kubeconfig"),
		state:         filepath.Join(dir, "state.json"),
		pidFile:       filepath.Join(dir, "supervisor.pid"),
		supervisorLog: filepath.Join(dir, "supervisor.log"),
		lock:          filepath.Join(dir, ".lock"),
	}, nil
}

// lock serialises up and down (and status) of concurrent invocations.
func lock(p paths) (func(), error) {
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p.lock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}

// supervisor returns the recorded supervisor if it is still running.
func supervisor(p paths) (fluxenv.PIDInfo, bool) {
	var s fluxenv.PIDInfo
	data, err := os.ReadFile(p.pidFile)
	if err != nil || json.Unmarshal(data, &s) != nil {
		return s, false
	}
	return s, s.Alive()
}

func readState(p paths) (*state, error) {
	data, err := os.ReadFile(p.state)
	if err != nil {
		return nil, err
	}
	var s state
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", p.state, err)
	}
	return &s, nil
}

func up(p paths) error {
	unlock, err := lock(p)
	if err != nil {
		return err
	}
	defer unlock()

	if sup, alive := supervisor(p); alive {
		if st, err := readState(p); err == nil && st.Supervisor.PID == sup.PID {
			fmt.Printf("dev cluster already running (supervisor pid %d)\n", sup.PID)
			printInfo(p, st)
			return nil
		}
		fmt.Printf("dev cluster is starting (supervisor pid %d); waiting for it\n", sup.PID)
		return waitReady(p, sup)
	}

	// nothing runs: clear what a dead supervisor may have left, check the binaries, start one
	_ = os.Remove(p.state)
	_ = os.Remove(p.pidFile)
	if _, err := fluxenv.LoadTestBin(); err != nil {
		return err
	}
	started := time.Now()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	logFile, err := os.OpenFile(p.supervisorLog, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	cmd := exec.Command(exe, "serve")
	cmd.Dir = p.root
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
	if err := writeJSON(p.pidFile, sup); err != nil {
		_ = syscall.Kill(sup.PID, syscall.SIGTERM)
		return err
	}
	fmt.Printf("starting the dev cluster (supervisor pid %d, log %s)\n", sup.PID, rel(p, p.supervisorLog))
	return waitReadyOrExit(p, sup, exited, started)
}

func waitReady(p paths, sup fluxenv.PIDInfo) error {
	return waitReadyOrExit(p, sup, nil, time.Now())
}

// waitReadyOrExit polls for the state file of supervisor sup, until upTimeout. exited, if not
// nil, reports the supervisor's exit (it is our child).
func waitReadyOrExit(p paths, sup fluxenv.PIDInfo, exited <-chan error, since time.Time) error {
	deadline := time.Now().Add(upTimeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if st, err := readState(p); err == nil && st.Supervisor.PID == sup.PID {
			fmt.Printf("dev cluster ready in %s\n", time.Since(since).Round(100*time.Millisecond))
			printInfo(p, st)
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the supervisor exited (%v) before the cluster was ready; last lines of %s:\n%s",
				err, p.supervisorLog, fluxenv.Tail(p.supervisorLog, 40))
		case <-tick.C:
		}
		if exited == nil && !sup.Alive() {
			return fmt.Errorf("the supervisor (pid %d) died before the cluster was ready; last lines of %s:\n%s",
				sup.PID, p.supervisorLog, fluxenv.Tail(p.supervisorLog, 40))
		}
		if time.Now().After(deadline) {
			stopErr := stopSupervisor(p, sup)
			return fmt.Errorf("the cluster was not ready after %s (supervisor stopped: %v); last lines of %s:\n%s",
				upTimeout, stopErr, p.supervisorLog, fluxenv.Tail(p.supervisorLog, 40))
		}
	}
}

func down(p paths) error {
	unlock, err := lock(p)
	if err != nil {
		return err
	}
	defer unlock()
	sup, alive := supervisor(p)
	if !alive {
		st, _ := readState(p)
		_ = os.Remove(p.state)
		_ = os.Remove(p.pidFile)
		// its children die with it (Pdeathsig); make sure none survived a crash
		if st != nil {
			if left := stillRunning(st.Processes); len(left) > 0 {
				return fmt.Errorf("the supervisor is gone but these processes still run: %s", describe(left))
			}
		}
		fmt.Println("dev cluster is not running: nothing to stop")
		return nil
	}
	st, _ := readState(p)
	fmt.Printf("stopping the dev cluster (supervisor pid %d)\n", sup.PID)
	start := time.Now()
	if err := stopSupervisor(p, sup); err != nil {
		return err
	}
	if st != nil {
		deadline := time.Now().Add(childrenLinger)
		for len(stillRunning(st.Processes)) > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // polling /proc
		}
		if left := stillRunning(st.Processes); len(left) > 0 {
			return fmt.Errorf("the supervisor exited but these processes still run: %s", describe(left))
		}
	}
	_ = os.Remove(p.state)
	_ = os.Remove(p.pidFile)
	n := 0
	if st != nil {
		n = len(st.Processes)
	}
	fmt.Printf("dev cluster stopped in %s (supervisor and %d processes gone)\n", time.Since(start).Round(100*time.Millisecond), n)
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
				sup.PID, downTimeout, p.supervisorLog)
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

func describe(procs []fluxenv.PIDInfo) string {
	var s []string
	for _, pr := range procs {
		s = append(s, fmt.Sprintf("%s (pid %d)", pr.Name, pr.PID))
	}
	return strings.Join(s, ", ")
}

func status(p paths) error {
	sup, running := supervisor(p)
	if !running {
		fmt.Println("dev cluster: not running (start it with `make dev-cluster`)")
		return nil
	}
	st, err := readState(p)
	if err != nil || st.Supervisor.PID != sup.PID {
		fmt.Printf("dev cluster: starting (supervisor pid %d, log %s)\n", sup.PID, rel(p, p.supervisorLog))
		return nil
	}
	fmt.Printf("dev cluster: running since %s (supervisor pid %d)\n", st.Ready.Format(time.RFC3339), sup.PID)
	printInfo(p, st)
	var dead []string
	for _, pr := range st.Processes {
		if !pr.Alive() {
			dead = append(dead, fmt.Sprintf("%s (pid %d)", pr.Name, pr.PID))
		}
	}
	if len(dead) > 0 {
		return fmt.Errorf("not healthy: exited: %s (see %s)", strings.Join(dead, ", "), rel(p, st.LogDir))
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
	fmt.Printf("  artifact storage:   http://%s (source-controller)\n", st.StorageAddr)
	for _, d := range st.CRDDirs {
		fmt.Printf("  CRDs from:          %s\n", rel(p, d))
	}
	var procs []string
	for _, pr := range st.Processes {
		procs = append(procs, fmt.Sprintf("%s %d", pr.Name, pr.PID))
	}
	fmt.Printf("  processes:          %s\n", strings.Join(procs, ", "))
	fmt.Printf("  logs:               %s/, %s\n", rel(p, st.LogDir), rel(p, p.supervisorLog))
	fmt.Printf("  stop it with:       make dev-cluster-down (go run ./hack/devcluster down)\n")
}

func rel(p paths, path string) string {
	if r, err := filepath.Rel(p.root, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// serve is the supervisor: it starts the cluster, writes the state file and blocks until
// SIGTERM or SIGINT, then stops everything.
func serve(p paths) error {
	log.SetFlags(log.LstdFlags | log.Lmicroseconds)
	log.SetPrefix("supervisor: ")
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	signal.Ignore(syscall.SIGHUP)

	self := fluxenv.NewPIDInfo("supervisor", os.Getpid())
	var crdDirs []string
	if own := filepath.Join(p.root, "config", "crd", "bases"); hasYAML(own) {
		crdDirs = append(crdDirs, own)
	}
	log.Printf("starting (pid %d, work dir %s)", self.PID, p.dir)
	env, err := fluxenv.Start(ctx, fluxenv.Options{
		WorkDir:        p.dir,
		KubeconfigPath: p.kubeconfig,
		CRDDirs:        crdDirs,
		Logf:           log.Printf,
	})
	if err != nil {
		return err
	}
	stop := func() error {
		log.Printf("stopping")
		start := time.Now()
		err := env.Stop()
		_ = os.Remove(p.state)
		_ = os.Remove(p.kubeconfig)
		if err != nil {
			return err
		}
		log.Printf("stopped in %s; processes gone: %s", time.Since(start).Round(time.Millisecond), describe(env.Processes()))
		return nil
	}

	repos, err := fixtureRepos(p, env)
	if err != nil {
		return errors.Join(err, stop())
	}
	st := state{
		Supervisor:   self,
		Processes:    env.Processes(),
		Kubeconfig:   env.KubeconfigPath,
		APIServer:    env.Config.Host,
		GitURLBase:   env.Git.URLBase,
		Repositories: repos,
		StorageAddr:  env.StorageAddr,
		Ports:        env.Ports,
		CRDDirs:      append([]string{env.TestBin.FluxCRDsDir}, crdDirs...),
		LogDir:       env.LogDir,
		Ready:        time.Now(),
	}
	if err := writeJSON(p.state, st); err != nil {
		return errors.Join(err, stop())
	}
	log.Printf("ready: %s", describe(st.Processes))

	// report (and keep running) if a controller dies, so that status shows it
	for _, pr := range []*fluxenv.Process{env.SourceController, env.KustomizeController} {
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

// fixtureRepos creates <name>.git for every directory of fixtures/.
func fixtureRepos(p paths, env *fluxenv.Env) (map[string]string, error) {
	repos := map[string]string{}
	fixtures := filepath.Join(p.root, "fixtures")
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
		repos[e.Name()] = env.Git.URL(e.Name())
		log.Printf("repository %s from fixtures/%s at %s", env.Git.URL(e.Name()), e.Name(), sha)
	}
	return repos, nil
}

func hasYAML(dir string) bool {
	for _, pat := range []string{"*.yaml", "*.yml"} {
		if m, _ := filepath.Glob(filepath.Join(dir, pat)); len(m) > 0 {
			return true
		}
	}
	return false
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
