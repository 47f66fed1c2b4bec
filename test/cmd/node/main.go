// Command node runs a real single Kubernetes node on this machine (test/kubenode) in the
// background, for `make node` and `make demo-node`.
//
//	go run ./test/cmd/node up [--demo]   start it (idempotent: a crashed one is cleaned up first)
//	go run ./test/cmd/node down          stop it and remove everything it left
//	go run ./test/cmd/node load TAR...   import images into its containerd
//
// `up` starts a detached supervisor (this program re-executed as `serve`, in its own session,
// output in bin/node-demo.log) that owns the node's processes and keeps the API server forwarder
// on 127.0.0.1. With --demo the supervisor also loads bin/images, installs Flux and this
// controller as users do, serves fixtures/node-app from a Git server inside the node's network
// and applies a GitRepository and three stages (app-dev, verified by its error rate in a
// Prometheus inside the node; app-staging; app-prod, approved by a person); it plays release 1
// through dev and staging and a release 2 that fails its verification in dev. `up` prints the
// demo's progress, then asks each stage's application through `kubectl port-forward` and prints
// the answers and the `flux kcl get` table.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
	"github.com/kcl-flux/kcl-artifact-controller/test/kubenode"
)

const (
	nodeName  = "demo"
	upTimeout = 15 * time.Minute
)

// state is what the supervisor writes once the node (and the demo) is ready.
type state struct {
	Supervisor fluxenv.PIDInfo `json:"supervisor"`
	Kubeconfig string          `json:"kubeconfig"`
	Demo       *demoState      `json:"demo,omitempty"`
	Error      string          `json:"error,omitempty"`
}

type paths struct{ root, bin, state, log string }

func main() {
	log.SetFlags(0)
	root, err := fluxenv.RepoRoot()
	if err != nil {
		log.Fatalf("node: %v", err)
	}
	bin := filepath.Join(root, "bin")
	p := paths{root: root, bin: bin, state: filepath.Join(bin, "node-"+nodeName+".json"),
		log: filepath.Join(bin, "node-"+nodeName+".log")}
	if len(os.Args) < 2 {
		log.Fatal("usage: node up [--demo] | down | load TAR... | clean NAME")
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	demo := fs.Bool("demo", false, "install Flux, this controller and the demo application")
	_ = fs.Parse(os.Args[2:])
	switch os.Args[1] {
	case "up":
		err = up(p, *demo)
	case "serve":
		err = serve(p, *demo)
	case "down":
		err = down(p)
	case "load":
		err = load(fs.Args())
	case "clean":
		err = clean(fs.Args())
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		log.Fatalf("node: %v", err)
	}
}

// clean removes what a node left after its owner was killed: the node suite's is "test"
// (`go run ./test/cmd/node clean test`), the demo's is down's business.
func clean(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: node clean NAME")
	}
	return kubenode.Cleanup(kubenode.Options{Name: args[0], Logf: func(f string, a ...any) { log.Printf(f, a...) }})
}

func opts() kubenode.Options {
	return kubenode.Options{Name: nodeName, Logf: func(f string, a ...any) { log.Printf(f, a...) }}
}

// up starts the supervisor unless one runs, and waits for its state.
func up(p paths, demo bool) error {
	if st, err := readState(p); err == nil && st.Supervisor.Alive() && st.Error == "" && (!demo || st.Demo != nil) {
		fmt.Printf("node %s already runs (supervisor pid %d)\n", nodeName, st.Supervisor.PID)
		return report(p, st)
	}
	if err := down(p); err != nil {
		return err
	}
	logFile, err := os.Create(p.log)
	if err != nil {
		return err
	}
	defer logFile.Close()
	args := []string{"serve"}
	if demo {
		args = append(args, "--demo")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = p.root
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	fmt.Printf("starting node %s (supervisor pid %d, log %s)...\n", nodeName, cmd.Process.Pid, p.log)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	st, err := waitState(p, exited)
	if err != nil {
		return fmt.Errorf("%w; last lines of %s:\n%s", err, p.log, fluxenv.Tail(p.log, 30))
	}
	return report(p, st)
}

// waitState waits for the supervisor's state, and meanwhile prints the progress lines of its
// log (the node ready, the demo's steps with their durations).
func waitState(p paths, exited <-chan error) (*state, error) {
	deadline := time.After(upTimeout)
	var offset int64
	for {
		offset = printProgress(p.log, offset)
		if st, err := readState(p); err == nil {
			printProgress(p.log, offset)
			if st.Error != "" {
				return nil, errors.New(st.Error)
			}
			return st, nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("the supervisor exited (%v)", err)
		case <-deadline:
			return nil, fmt.Errorf("not ready after %s", upTimeout)
		case <-time.After(time.Second):
		}
	}
}

// printProgress prints the complete lines of the log from offset that tell progress ("demo: ...",
// the node ready) and returns the offset after them.
func printProgress(path string, offset int64) int64 {
	f, err := os.Open(path)
	if err != nil {
		return offset
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return offset
	}
	data, _ := io.ReadAll(f)
	end := bytes.LastIndexByte(data, '\n')
	if end < 0 {
		return offset
	}
	for _, line := range strings.Split(string(data[:end]), "\n") {
		if strings.HasPrefix(line, "demo: ") || strings.Contains(line, "kubenode: node "+nodeName+" ready") {
			fmt.Println(line)
		}
	}
	return offset + int64(end) + 1
}

func report(p paths, st *state) error {
	fmt.Printf("export KUBECONFIG=%s\n", st.Kubeconfig)
	if st.Demo == nil {
		return nil
	}
	return reportDemo(p, st)
}

// serve runs the node until SIGTERM.
func serve(p paths, demo bool) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	_ = os.Remove(p.state)
	node, err := kubenode.Start(ctx, opts())
	if err != nil {
		_ = writeState(p, &state{Error: err.Error()})
		return err
	}
	defer func() {
		if err := node.Stop(); err != nil {
			log.Printf("stopping: %v", err)
		}
		_ = os.Remove(p.state)
	}()
	st := &state{Supervisor: fluxenv.NewPIDInfo("supervisor", os.Getpid()), Kubeconfig: node.KubeconfigPath}
	if demo {
		d, stopDemo, err := startDemo(ctx, p, node)
		if stopDemo != nil {
			defer stopDemo()
		}
		if err != nil {
			_ = writeState(p, &state{Error: err.Error()})
			return err
		}
		st.Demo = d
	}
	if err := writeState(p, st); err != nil {
		return err
	}
	log.Printf("node %s ready; stop it with `make node-down`", nodeName)
	<-ctx.Done()
	return nil
}

// down stops the supervisor, then removes whatever the node left (also after a crash).
func down(p paths) error {
	if st, err := readState(p); err == nil && st.Supervisor.Alive() {
		_ = syscall.Kill(st.Supervisor.PID, syscall.SIGTERM)
		deadline := time.Now().Add(2 * time.Minute)
		for st.Supervisor.Alive() && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		if st.Supervisor.Alive() {
			_ = syscall.Kill(st.Supervisor.PID, syscall.SIGKILL)
		}
	}
	_ = os.Remove(p.state)
	if err := kubenode.Cleanup(opts()); err != nil {
		return err
	}
	fmt.Printf("node %s: stopped, nothing left (processes, mounts, cgroups, namespaces, sysctls)\n", nodeName)
	return nil
}

// load imports image tarballs into the running node's containerd.
func load(tars []string) error {
	n, err := kubenode.Attach(opts())
	if err != nil {
		return err
	}
	for _, t := range tars {
		if err := n.ImportImage(context.Background(), t); err != nil {
			return err
		}
		fmt.Printf("loaded %s\n", t)
	}
	return nil
}

func readState(p paths) (*state, error) {
	data, err := os.ReadFile(p.state)
	if err != nil {
		return nil, err
	}
	var st state
	return &st, json.Unmarshal(data, &st)
}

func writeState(p paths, st *state) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.state+".tmp", data, 0o644); err != nil {
		return err
	}
	return os.Rename(p.state+".tmp", p.state)
}
