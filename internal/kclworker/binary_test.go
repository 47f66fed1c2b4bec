package kclworker_test

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/procstatus"
)

// buildWorkerBinary builds cmd/kcl-worker into dir as `make build` does (CGO_ENABLED=0).
func buildWorkerBinary(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, kclworker.WorkerBinary)
	cmd := osexec.Command("go", "build", "-trimpath", "-o", out, "github.com/kcl-flux/kcl-artifact-controller/cmd/kcl-worker")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kcl-worker: %v\n%s", err, b)
	}
	return out
}

func writeExecutable(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/false\n"), mode); err != nil {
		t.Fatal(err)
	}
}

// The pool starts the kcl-worker binary beside the executable when there is one (an executable
// regular file; the executable's symbolic link resolved), else the executable itself with the
// worker subcommand.
func TestCommandBeside(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "kcl-artifact-controller")
	writeExecutable(t, exe, 0o755)
	self := []string{exe, kclworker.Subcommand}
	if got := kclworker.CommandBeside(exe); !reflect.DeepEqual(got, self) {
		t.Fatalf("without a sibling: %q, want %q", got, self)
	}
	sibling := filepath.Join(dir, kclworker.WorkerBinary)
	writeExecutable(t, sibling, 0o644)
	if got := kclworker.CommandBeside(exe); !reflect.DeepEqual(got, self) {
		t.Fatalf("a sibling that is not executable: %q, want %q", got, self)
	}
	if err := os.Chmod(sibling, 0o755); err != nil {
		t.Fatal(err)
	}
	want := []string{sibling, kclworker.Subcommand}
	if got := kclworker.CommandBeside(exe); !reflect.DeepEqual(got, want) {
		t.Fatalf("with a sibling: %q, want %q", got, want)
	}
	// a link to the controller elsewhere (/usr/local/bin/x -> /opt/kcl/bin/x) finds the real
	// directory's worker, as the engine library is found
	link := filepath.Join(t.TempDir(), "kcl-artifact-controller")
	if err := os.Symlink(exe, link); err != nil {
		t.Fatal(err)
	}
	if got := kclworker.CommandBeside(link); !reflect.DeepEqual(got, want) {
		t.Fatalf("through a link: %q, want %q", got, want)
	}
	// the worker binary itself is not its own sibling: it runs with the subcommand too
	if got := kclworker.CommandBeside(sibling); !reflect.DeepEqual(got, want) {
		t.Fatalf("for the worker binary: %q, want %q", got, want)
	}
	// this test binary has no kcl-worker beside it: it serves as the worker (TestMain)
	cmd, err := kclworker.DefaultCommand()
	if err != nil {
		t.Fatal(err)
	}
	if testExe, _ := os.Executable(); len(cmd) != 2 || filepath.Base(cmd[0]) != filepath.Base(testExe) || cmd[1] != kclworker.Subcommand {
		t.Fatalf("DefaultCommand in a test binary: %q, want %s %s", cmd, testExe, kclworker.Subcommand)
	}
}

// The real kcl-worker binary, found beside a controller binary, renders confined: it sets up
// the sandbox and re-executes itself (the confined worker's executable is still kcl-worker, run
// with --confined), and an attack of the sandbox tests still fails in it.
func TestWorkerBinaryBesideTheController(t *testing.T) {
	dir := t.TempDir()
	worker := buildWorkerBinary(t, dir)
	controller := filepath.Join(dir, "kcl-artifact-controller")
	writeExecutable(t, controller, 0o755)
	cmd := kclworker.CommandBeside(controller)
	if cmd[0] != worker {
		t.Fatalf("the pool's command %q does not start %s", cmd, worker)
	}
	p, err := kclworker.New(kclworker.Options{Size: 1, Sandbox: true, LibPath: libPath(t), Command: cmd})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	tn := newTenant(t, "tenant-a")
	if out, err := tn.run(t, p, "v = 1\n"); err != nil || strings.TrimSpace(out) != "v: 1" {
		t.Fatalf("render in the kcl-worker binary: %v %q", err, out)
	}
	pids := p.IdlePIDs(tn.domain.Name)
	if len(pids) != 1 {
		t.Fatalf("want one idle worker, got %v", pids)
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pids[0]) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pids[0]) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	if exe != worker || len(args) < 2 || args[1] != kclworker.Subcommand || !strings.Contains(string(cmdline), "--confined") {
		t.Fatalf("the idle worker runs %s %q, want the confined %s", exe, args, worker)
	}
	out, err := tn.run(t, p, "import file\nx = file.read(\""+tn.secret+"\")\n")
	noMarker(t, out, err)
	if err != nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("reading outside the root from kcl-worker must fail with permission denied, got %v %q", err, out)
	}
}

// With the defaults and the kcl-worker binary, a warm worker of each of 100 namespaces stays
// idle (none evicted by the count or the memory bound), as the scale harness's 10,000
// KCLArtifacts over 100 namespaces need; the memory the pool counts for them is their RssAnon.
func TestDefaultsKeepAWarmWorkerPerNamespace(t *testing.T) {
	const namespaces = 100
	worker := buildWorkerBinary(t, t.TempDir())
	p, err := kclworker.New(kclworker.Options{Sandbox: true, LibPath: libPath(t), Command: []string{worker, kclworker.Subcommand}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	var anon uint64
	for i := range namespaces {
		tn := newTenant(t, fmt.Sprintf("ns-%d", i))
		if out, err := tn.run(t, p, variedProgram(i)); err != nil || !strings.Contains(out, "kind: ConfigMap") {
			t.Fatalf("render in %s: %v %.200q", tn.domain.Name, err, out)
		}
		pids := p.IdlePIDs(tn.domain.Name)
		if len(pids) != 1 {
			t.Fatalf("%s: want one idle worker, got %v (%+v)", tn.domain.Name, pids, p.Stats())
		}
		st, err := procstatus.Bytes(pids[0], "RssAnon")
		if err != nil {
			t.Fatal(err)
		}
		anon += st["RssAnon"]
	}
	s := p.Stats()
	if s.Started != namespaces || s.Evicted != 0 || s.Recycled != 0 {
		t.Fatalf("want %d workers started and every one kept idle: %+v", namespaces, s)
	}
	counted := p.IdleMemory()
	t.Logf("%d idle kcl-workers: RssAnon %.1f MiB together, counted %.1f MiB of the %d MiB bound",
		namespaces, float64(anon)/(1<<20), float64(counted)/(1<<20), kclworker.DefaultMaxIdleMemory>>20)
	// counted when each was given back, read again now: the same pages, give or take a few
	if diff := int64(counted) - int64(anon); diff < -int64(anon)/10 || diff > int64(anon)/10 {
		t.Errorf("the pool counts %d bytes for its idle workers, their RssAnon is %d", counted, anon)
	}
}

// A worker of another build than the pool (a stale kcl-worker beside a new controller) refuses
// to serve, and the pool's error says why: here the test binary is run as a worker of another
// protocol version (the last --protocol wins).
func TestWorkerOfAnotherBuildRefuses(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := kclworker.New(kclworker.Options{Size: 1, LibPath: libPath(t),
		Command: []string{"/bin/sh", "-c", `exec "$0" "$@" --protocol=999`, self, kclworker.Subcommand}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	_, err = exec(context.Background(), p, writeProgram(t, "v = 1\n"))
	werr := workerError(t, err, kclworker.ReasonCrash)
	if !strings.Contains(werr.Detail, "protocol 999") || !strings.Contains(werr.Detail, "another build") {
		t.Fatalf("want the worker's reason (another build), got %q", werr.Detail)
	}
	// a worker older than the --protocol argument says only that it does not know it (as the
	// controller binary before it did, run as a stale kcl-worker): the pool adds why
	old, err := kclworker.New(kclworker.Options{Size: 1, LibPath: libPath(t),
		Command: []string{"/bin/sh", "-c", `echo "kcl worker: flag provided but not defined: -protocol" >&2; exit 3`}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(old.Close)
	_, err = exec(context.Background(), old, writeProgram(t, "v = 1\n"))
	werr = workerError(t, err, kclworker.ReasonCrash)
	if !strings.Contains(werr.Detail, "-protocol") || !strings.Contains(werr.Detail, "/bin/sh is of another build") {
		t.Fatalf("want the flag error and why, got %q", werr.Detail)
	}
}
