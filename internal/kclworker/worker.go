package kclworker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
)

// worker is one engine process, bound to one trust domain for its whole life.
type worker struct {
	domain   Domain
	cmd      *exec.Cmd
	conn     *os.File
	resp     *bufio.Reader
	stderr   *tail
	calls    int
	limit    uint64
	maxFrame uint64
	lastUsed time.Time
	idleMem  uint64        // private memory when last given back to the pool
	done     chan struct{} // closed once the process has been reaped
	// statm stays open for the worker's life: reading it after every render is then one pread,
	// not an open, read and close.
	statm *os.File
}

func startWorker(o Options, d Domain) (*worker, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("kcl worker channel: %w", err)
	}
	// Non-blocking on our side only, so reads go through the runtime poller.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, err
	}
	conn, child := os.NewFile(uintptr(fds[0]), "kcl-worker"), os.NewFile(uintptr(fds[1]), "kcl-worker-child")
	w := &worker{domain: d, stderr: newTail(8 << 10), limit: o.MemoryLimit, maxFrame: maxAnswer(o.MaxOutput),
		done: make(chan struct{})}
	cfg := config{protocol: protocolVersion, lib: o.LibPath, memory: o.MemoryLimit, maxOutput: o.MaxOutput, noSeccomp: o.noSeccomp}
	if o.Sandbox {
		cfg.roots = d.Roots
	}
	cmd := exec.Command(o.Command[0], append(o.Command[1:], cfg.args()...)...)
	// Nothing of the controller's environment reaches a program (file.read_env).
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{child}
	cmd.Stdout, cmd.Stderr = w.stderr, w.stderr
	// A worker must not outlive the process that feeds it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	child.Close()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("starting KCL worker %s: %w", o.Command[0], err)
	}
	w.cmd, w.conn, w.resp = cmd, conn, bufio.NewReader(conn)
	w.statm, _ = os.Open(fmt.Sprintf("/proc/%d/statm", cmd.Process.Pid))
	go func() {
		_ = cmd.Wait()
		conn.Close()
		if w.statm != nil {
			w.statm.Close()
		}
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

func (w *worker) call(ctx context.Context, timeout time.Duration, req request) ([]byte, error) {
	w.calls++
	n, err := newNonce()
	if err != nil {
		return nil, err
	}
	req.nonce = n
	ch := make(chan reply, 1)
	go func() {
		if err := writeFrame(w.conn, req.encode()...); err != nil {
			ch <- reply{err: err}
			return
		}
		var reserve func(uint64) error
		if req.reserve != nil {
			reserve = func(size uint64) error { return req.reserve(ctx, size) }
		}
		f, err := readFrameReserved(w.resp, w.maxFrame, reserve)
		ch <- reply{f, err}
	}()
	select {
	case r := <-ch:
		var tooLarge *FrameTooLargeError
		if errors.As(r.err, &tooLarge) {
			// the worker loop would have sent an error instead: this frame is not its doing
			w.kill()
			return nil, &WorkerError{Reason: ReasonProtocol, Detail: "the engine worker announced an answer of " +
				strconv.FormatUint(tooLarge.Size, 10) + " bytes, over the limit of " + strconv.FormatUint(tooLarge.Max, 10) +
				"; it was killed before anything was read"}
		}
		var unreserved *reserveError
		if errors.As(r.err, &unreserved) {
			// the answer is still in the channel: the worker cannot serve another call
			w.kill()
			return nil, w.stopped(ctx, timeout)
		}
		if r.err != nil {
			w.kill()
			return nil, w.deathCause()
		}
		return w.answer(n, r.frame)
	case <-ctx.Done():
		w.kill()
		<-ch
		return nil, w.stopped(ctx, timeout)
	}
}

// stopped is the error of a call given up at its deadline or cancellation.
func (w *worker) stopped(ctx context.Context, timeout time.Duration) error {
	if ctx.Err() == context.DeadlineExceeded {
		return &WorkerError{Reason: ReasonTimeout, Detail: fmt.Sprintf(
			"the render did not finish within %s; the engine worker was killed", timeout)}
	}
	return &WorkerError{Reason: ReasonCanceled, Detail: "the render was cancelled; the worker was killed"}
}

// answer accepts exactly one answer to the request with nonce n. Anything else means something
// other than the worker loop wrote to the channel: the worker is killed, never reused.
func (w *worker) answer(n nonce, frame []byte) ([]byte, error) {
	status, payload, err := checkAnswer(n, frame)
	if err == nil && w.resp.Buffered() > 0 {
		err = fmt.Errorf("%d unexpected bytes after the answer", w.resp.Buffered())
	}
	if err != nil {
		w.kill()
		return nil, &WorkerError{Reason: ReasonProtocol, Detail: "the engine worker broke the protocol (" +
			err.Error() + "); it was killed and its answer discarded"}
	}
	if status == statusError {
		if msg := string(payload); strings.HasPrefix(msg, outputTooLargePrefix) {
			return nil, parseOutputTooLarge(msg)
		}
		return nil, &kcllib.EngineError{Message: string(payload)}
	}
	return payload, nil
}

// kill ends the process and waits until it is reaped.
func (w *worker) kill() {
	_ = w.cmd.Process.Kill()
	<-w.done
}

// stop asks the worker to exit by closing its channel, and kills it if it lingers.
func (w *worker) stop() {
	if rc, err := w.conn.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_WR) })
	}
	go func() {
		select {
		case <-w.done:
		case <-time.After(5 * time.Second):
			_ = w.cmd.Process.Kill()
		}
	}()
}

// memory returns the worker's resident memory and the private part of it (resident less the
// file and shared pages: the engine library's pages are shared by every worker), in bytes, or
// zeros when unknown.
func (w *worker) memory() (rss, private uint64) {
	var buf [128]byte
	if w.statm == nil {
		return 0, 0
	}
	n, err := w.statm.ReadAt(buf[:], 0)
	if n == 0 || (err != nil && !errors.Is(err, io.EOF)) {
		return 0, 0
	}
	f := strings.Fields(string(buf[:n]))
	if len(f) < 3 {
		return 0, 0
	}
	resident, _ := strconv.ParseUint(f[1], 10, 64)
	shared, _ := strconv.ParseUint(f[2], 10, 64)
	page := uint64(os.Getpagesize())
	return resident * page, (resident - min(shared, resident)) * page
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
		if strings.Contains(line, "flag provided but not defined") && !strings.Contains(line, anotherBuildMark) {
			// a worker older than one of the pool's arguments, which cannot say so itself
			line += " (" + anotherBuild(w.cmd.Path) + ")"
		}
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
