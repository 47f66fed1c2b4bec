package fluxenv

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a child process started by the Env (a Flux controller).
type Process struct {
	Name      string   // e.g. "source-controller"
	Path      string   // binary
	Args      []string // arguments (without the binary)
	LogPath   string   // stdout and stderr of the process
	HealthURL string   // readiness endpoint polled by Start
	// HealthClient polls HealthURL; default a plain client without proxy (a process in another
	// network namespace needs a client dialing from inside it).
	HealthClient *http.Client

	cmd       *exec.Cmd
	startTime uint64 // /proc/<pid>/stat start time, to tell the process from a reused PID
	logFile   *os.File
	done      chan struct{}
	waitErr   error
}

// PID returns the process ID, or 0 if the process was never started.
func (p *Process) PID() int {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} {
	return p.done
}

// Exited reports whether the process has exited (and been reaped), with its exit error.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.waitErr
	default:
		return false, nil
	}
}

// StartProcess starts path with args and env, output appended to logPath. The child is in its
// own process group and gets SIGKILL when the process that started it dies (Pdeathsig), so a
// crashed test or supervisor leaves nothing behind.
func StartProcess(name, path string, args, env []string, logPath string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, Path: path, Args: args, LogPath: logPath, cmd: cmd, logFile: logFile,
		done: make(chan struct{})}
	p.startTime, _ = procStartTime(cmd.Process.Pid)
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Stop sends SIGTERM to the process group, then SIGKILL after grace, and waits for the exit.
func (p *Process) Stop(grace time.Duration) error {
	if p == nil || p.cmd == nil {
		return nil
	}
	if exited, _ := p.Exited(); exited {
		return nil
	}
	pid := p.PID()
	_ = syscall.Kill(-pid, syscall.SIGTERM) // the group: the process and anything it started
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return fmt.Errorf("%s (pid %d) did not stop within %s of SIGTERM; killed", p.Name, pid, grace)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) still running 10s after SIGKILL", p.Name, pid)
	}
}

// waitHealthy polls p.HealthURL until it answers 200, the process exits, or the deadline passes.
func (p *Process) waitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := p.HealthClient
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	}
	var last string
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.HealthURL, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before becoming ready (%v); last %d lines of %s:\n%s",
				p.Name, p.waitErr, tailLines, p.LogPath, Tail(p.LogPath, tailLines))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s after %s (last: %s); last %d lines of %s:\n%s",
				p.Name, p.HealthURL, timeout, last, tailLines, p.LogPath, Tail(p.LogPath, tailLines))
		case <-tick.C:
		}
	}
}

const tailLines = 40

// Tail returns the last n lines of a file (or a note saying why it cannot be read).
func Tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freePorts returns n distinct free ports (all listeners are held until the end, so the kernel
// does not hand out the same port twice).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// procStartTime returns field 22 of /proc/<pid>/stat (start time in clock ticks since boot).
func procStartTime(pid int) (uint64, error) {
	st, err := ReadProcStat(pid)
	return st.Start, err
}

// PIDInfo identifies a process across PID reuse: the PID plus its start time.
type PIDInfo struct {
	Name      string `json:"name"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"` // /proc/<pid>/stat field 22; 0 if unknown
}

// NewPIDInfo returns the PIDInfo of a running process (StartTime 0 if it cannot be read).
func NewPIDInfo(name string, pid int) PIDInfo {
	st, _ := procStartTime(pid)
	return PIDInfo{Name: name, PID: pid, StartTime: st}
}

// Alive reports whether the process still exists (zombies count as gone) and is the same one
// (same start time, when known).
func (p PIDInfo) Alive() bool {
	return ProcessAlive(p.PID, p.StartTime)
}

// ProcessAlive reports whether pid exists, is not a zombie, and (if startTime is not 0) started
// at startTime.
func ProcessAlive(pid int, startTime uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := ReadProcStat(pid)
	return err == nil && !st.Gone() && (startTime == 0 || st.Start == startTime)
}

// childrenRunning returns the PIDs of the live children of parent whose executable is exe.
func childrenRunning(parent int, exe string) []int {
	want, err := resolveExe(exe)
	if err != nil {
		return nil
	}
	var pids []int
	EachProcess(func(pid int, st ProcStat) {
		if st.PPID != parent || st.State == 'Z' {
			return
		}
		if got, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err == nil && got == want {
			pids = append(pids, pid)
		}
	})
	return pids
}

// resolveExe resolves symlinks in a binary path, as /proc/<pid>/exe shows it.
func resolveExe(path string) (string, error) {
	abs, err := exec.LookPath(path)
	if err != nil {
		return "", err
	}
	abs, err = filepath.Abs(abs)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}
