package childproc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// Exit is what a child left: its answer, when it gave one within the bound, and the head of
// its output, which only this package's explanations read (never quoted whole: a hostile
// server's words could be in it).
type Exit struct {
	// Answer is the child's answer, nil when it gave none or more than the bound.
	Answer []byte
	// Stopped: the context ended first and the child was killed.
	Stopped bool

	output  string
	waitErr error
}

// Run starts command (this executable and a subcommand) confined by cfg, gives it request on
// stdin, and waits for it to exit or for ctx to end, when it is killed. The error is about
// starting it; everything about how it ended is in Exit.
func Run(ctx context.Context, command []string, cfg Config, request []byte, maxAnswer int) (Exit, error) {
	rd, wr, err := os.Pipe()
	if err != nil {
		return Exit{}, err
	}
	defer rd.Close()
	out := &head{max: 16 << 10}
	cmd := exec.Command(command[0], append(command[1:], cfg.args()...)...)
	cmd.Env = passedEnv()
	cmd.Dir = "/"
	cmd.Stdin = bytes.NewReader(request)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.ExtraFiles = []*os.File{wr}
	// A child must not outlive the process waiting for it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	wr.Close()
	if err != nil {
		return Exit{}, err
	}
	answer := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(rd, int64(maxAnswer)+1))
		answer <- b
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-exited
		return Exit{Stopped: true, output: out.String()}, nil
	case waitErr := <-exited:
		b := <-answer
		if len(b) == 0 || len(b) > maxAnswer {
			b = nil
		}
		return Exit{Answer: b, output: out.String(), waitErr: waitErr}, nil
	}
}

// Status is how the child ended, as the process state says it ("signal: killed").
func (e Exit) Status() string {
	var ee *exec.ExitError
	if errors.As(e.waitErr, &ee) {
		return ee.ProcessState.String()
	}
	return "exited without an answer"
}

// OutOfMemory: the Go runtime or the kernel said the child ran out of its memory.
func (e Exit) OutOfMemory() bool {
	return strings.Contains(e.output, "out of memory") || strings.Contains(e.output, "cannot allocate memory")
}

// StartFailure is the line the child wrote when it could not set itself up (Main's own
// failures, before any request was served), and whether there is one.
func (e Exit) StartFailure(name string) (string, bool) {
	i := strings.Index(e.output, name+":")
	if i < 0 {
		return "", false
	}
	line := e.output[i:]
	if j := strings.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	return line, true
}

// LastLine is the rest of the last line of the output that starts with prefix: what a child
// says it is doing (the only words of it a caller may quote, as the child writes them itself).
func (e Exit) LastLine(prefix string) string {
	var found string
	for _, l := range strings.Split(e.output, "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			found = rest
		}
	}
	return found
}

// head keeps the first max bytes written: the Go runtime's reason for dying comes first.
type head struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (h *head) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - len(h.buf); room > 0 {
		h.buf = append(h.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (h *head) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return string(h.buf)
}
