package kclworker

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
)

// worker is one engine process.
type worker struct {
	cmd    *exec.Cmd
	req    *os.File
	resp   *bufio.Reader
	stderr *tail
	calls  int
	limit  uint64
	done   chan struct{} // closed once the process has been reaped
}

func startWorker(o Options) (*worker, error) {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	respR, respW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, err
	}
	w := &worker{stderr: newTail(8 << 10), limit: o.MemoryLimit, done: make(chan struct{})}
	cmd := exec.Command(o.Command[0], o.Command[1:]...)
	cmd.Env = append(os.Environ(), envLib+"="+o.LibPath,
		envMemoryLimit+"="+strconv.FormatUint(o.MemoryLimit, 10))
	cmd.ExtraFiles = []*os.File{reqR, respW}
	cmd.Stdout, cmd.Stderr = w.stderr, w.stderr
	// A worker must not outlive the process that feeds it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	reqR.Close()
	respW.Close()
	if err != nil {
		reqW.Close()
		respR.Close()
		return nil, fmt.Errorf("starting KCL worker %s: %w", o.Command[0], err)
	}
	w.cmd, w.req, w.resp = cmd, reqW, bufio.NewReader(respR)
	go func() {
		_ = cmd.Wait()
		respR.Close()
		close(w.done)
	}()
	return w, nil
}

func (w *worker) alive() bool {
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}

type reply struct {
	frame []byte
	err   error
}

func (w *worker) call(ctx context.Context, timeout time.Duration, method string, args []byte) ([]byte, error) {
	w.calls++
	ch := make(chan reply, 1)
	go func() {
		if err := writeFrame(w.req, encodeRequest(method, args)...); err != nil {
			ch <- reply{err: err}
			return
		}
		f, err := readFrame(w.resp)
		ch <- reply{f, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil || len(r.frame) == 0 {
			w.kill()
			return nil, w.deathCause()
		}
		if r.frame[0] == statusError {
			return nil, &kcllib.EngineError{Message: string(r.frame[1:])}
		}
		return r.frame[1:], nil
	case <-ctx.Done():
		w.kill()
		<-ch
		if ctx.Err() == context.DeadlineExceeded {
			return nil, &WorkerError{Reason: ReasonTimeout, Detail: fmt.Sprintf(
				"the render did not finish within %s; the engine worker was killed", timeout)}
		}
		return nil, &WorkerError{Reason: ReasonCanceled, Detail: "the render was cancelled; the worker was killed"}
	}
}

// kill ends the process and waits until it is reaped.
func (w *worker) kill() {
	_ = w.cmd.Process.Kill()
	<-w.done
	w.req.Close()
}

// stop asks the worker to exit by closing its request pipe, and kills it if it lingers.
func (w *worker) stop() {
	w.req.Close()
	go func() {
		select {
		case <-w.done:
		case <-time.After(5 * time.Second):
			_ = w.cmd.Process.Kill()
		}
	}()
}

// rss returns the worker's resident memory in bytes, or 0 when unknown.
func (w *worker) rss() uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/statm", w.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return pages * uint64(os.Getpagesize())
}

// deathCause explains why a worker that stopped answering died. Only the engine's own diagnostic
// line is kept, never the rest of its output, which could echo the program's data.
func (w *worker) deathCause() *WorkerError {
	<-w.done
	log := w.stderr.String()
	state := w.cmd.ProcessState
	status := "exited"
	if state != nil {
		status = state.String()
	}
	switch {
	case strings.Contains(log, "memory allocation of"), strings.Contains(log, "out of memory"),
		strings.Contains(log, "cannot allocate memory"):
		return &WorkerError{Reason: ReasonMemory, Detail: fmt.Sprintf(
			"the KCL program exceeded the worker memory limit of %s (%s)", humanBytes(w.limit), status)}
	case strings.Contains(log, "overflowed its stack"), strings.Contains(log, "stack overflow"):
		return &WorkerError{Reason: ReasonCrash, Detail: "the engine overflowed its stack, likely unbounded recursion (" + status + ")"}
	case strings.Contains(log, "SIGSEGV"):
		return &WorkerError{Reason: ReasonCrash, Detail: "the engine crashed with a segmentation fault, for instance on unbounded recursion (" + status + ")"}
	case strings.Contains(log, "SIGABRT"):
		return &WorkerError{Reason: ReasonCrash, Detail: "the engine aborted (SIGABRT)"}
	}
	if line := firstLine(log, "kcl worker:"); line != "" {
		return &WorkerError{Reason: ReasonCrash, Detail: line}
	}
	return &WorkerError{Reason: ReasonCrash, Detail: "the worker died: " + status}
}

func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

func humanBytes(n uint64) string {
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}
