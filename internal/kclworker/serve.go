package kclworker

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/sandbox"
)

// config is what the pool tells a worker. It travels as arguments: the environment is empty,
// because a program can read it (file.read_env).
type config struct {
	// protocol is the pool's protocolVersion
	protocol int
	lib      string
	memory   uint64
	// maxOutput bounds a rendered output; a larger answer is replaced by an error.
	maxOutput uint64
	// roots, when set, confine the worker: it may read these trees and nothing else.
	roots []string
	// confined marks the re-executed worker, already inside the sandbox.
	confined bool
	// noSeccomp is for the test showing what the seccomp filter prevents; nothing else sets it.
	noSeccomp bool
}

func (c config) args() []string {
	a := []string{"--protocol=" + strconv.Itoa(c.protocol), "--lib=" + c.lib, "--memory=" + strconv.FormatUint(c.memory, 10),
		"--max-output=" + strconv.FormatUint(c.maxOutput, 10)}
	for _, r := range c.roots {
		a = append(a, "--root="+r)
	}
	if c.confined {
		a = append(a, "--confined")
	}
	if c.noSeccomp {
		a = append(a, "--unsafe-no-seccomp")
	}
	return a
}

func parseConfig(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet(Subcommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&c.protocol, "protocol", 0, "")
	fs.StringVar(&c.lib, "lib", "", "")
	fs.Uint64Var(&c.memory, "memory", 0, "")
	fs.Uint64Var(&c.maxOutput, "max-output", DefaultMaxOutput, "")
	fs.Func("root", "", func(v string) error { c.roots = append(c.roots, v); return nil })
	fs.BoolVar(&c.confined, "confined", false, "")
	fs.BoolVar(&c.noSeccomp, "unsafe-no-seccomp", false, "")
	return c, fs.Parse(args)
}

// Main is the worker's entry point; it returns an exit code. The pool talks to it over fd 3, a
// socketpair (unlike a pipe, it cannot be reopened through /proc/self/fd). stdout and stderr go
// to a bounded tail in the pool, so anything the engine prints cannot corrupt a frame.
func Main(args []string) int {
	c, err := parseConfig(args)
	if err != nil {
		return fatal(fmt.Errorf("%w (%s?)", err, anotherBuild(os.Args[0])))
	}
	if c.protocol != protocolVersion {
		return fatal(fmt.Errorf("the pool speaks protocol %d and this worker %d: %s", c.protocol, protocolVersion, anotherBuild(os.Args[0])))
	}
	if len(c.roots) > 0 && !c.confined {
		return fatal(enterSandbox(c))
	}
	if !c.confined {
		if err := sandbox.SetLimits(sandbox.Limits{Memory: c.memory}); err != nil {
			return fatal(err)
		}
	}
	lib, err := kcllib.Load(c.lib)
	if err != nil {
		return fatal(err)
	}
	if c.confined {
		if err := harden(!c.noSeccomp); err != nil {
			return fatal(err)
		}
	}
	// The engine keeps thread-local state; keep every call on one OS thread.
	runtime.LockOSThread()
	svc := lib.NewService()
	ch := os.NewFile(3, "channel")
	if err := serve(svc, bufio.NewReader(ch), ch, c.roots, maxAnswer(c.maxOutput)); err != nil {
		return fatal(err)
	}
	return 0
}

func fatal(err error) int {
	fmt.Fprintln(os.Stderr, "kcl worker:", err)
	return 3
}

// enterSandbox confines this thread to read the namespace's staging root and the files a copy of
// this process maps once the engine is loaded, then replaces the process with that confined copy.
// It returns only on failure.
func enterSandbox(c config) error {
	runtime.LockOSThread()
	if err := sandbox.SetLimits(sandbox.Limits{Memory: c.memory, Confined: true}); err != nil {
		return err
	}
	if _, err := kcllib.Load(c.lib); err != nil {
		return err
	}
	c.confined = true
	return sandbox.Reexec(sandbox.Policy{ReadDirs: c.roots}, append([]string{Subcommand}, c.args()...), []string{})
}

// harden is what the confined worker adds once the engine is mapped: no core dumps and no
// ptrace or /proc/PID/mem by others of the same user, and the seccomp filter on every thread.
func harden(withSeccomp bool) error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE): %w", err)
	}
	if !withSeccomp {
		return nil
	}
	return sandbox.Seccomp()
}

// caller is the engine as the worker loop sees it.
type caller interface {
	Call(method string, args []byte) ([]byte, error)
}

func serve(svc caller, in io.Reader, out io.Writer, roots []string, max uint64) error {
	for {
		frame, err := readFrame(in, maxRequest)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		req, err := decodeRequest(frame)
		if err != nil {
			return err
		}
		// Relative paths in a program (file.read("values.yaml")) resolve as with `kcl run` in
		// the package directory.
		if err := enter(req.dir, roots); err != nil {
			return err
		}
		res, callErr := svc.Call(req.method, req.args)
		if callErr == nil && req.yamlOnly && req.method == kcllib.MethodExecProgram {
			res, callErr = kcllib.WithoutJSONResult(res)
		}
		if callErr == nil && uint64(len(res)) > max {
			// The pool would refuse it: say why and keep the worker.
			callErr = &OutputTooLargeError{Size: uint64(len(res)) / 2, Max: (max - 1<<20) / 2}
		}
		if callErr != nil {
			err = writeFrame(out, encodeAnswer(req.nonce, statusError, []byte(callErr.Error()))...)
		} else {
			err = writeFrame(out, encodeAnswer(req.nonce, statusOK, res)...)
		}
		if err != nil {
			return err
		}
	}
}

// enter makes dir the working directory; a confined worker stays inside its roots.
func enter(dir string, roots []string) error {
	if dir == "" {
		dir = "/"
		if len(roots) > 0 {
			dir = roots[0]
		}
	}
	if len(roots) > 0 && !slices.ContainsFunc(roots, func(r string) bool { return within(r, dir) }) {
		return fmt.Errorf("working directory %s is outside the worker's roots", dir)
	}
	return os.Chdir(dir)
}

func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
