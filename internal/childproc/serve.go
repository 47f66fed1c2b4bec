package childproc

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"github.com/kcl-flux/kcl-artifact-controller/internal/sandbox"
)

// maxRequest bounds what a child reads on its stdin: the parent writes it, but a bound costs
// nothing.
const maxRequest = 4 << 20

// Main is a child's entry point for subcommand (args are what follows it); name is how it
// calls itself in the one line it writes when it cannot set itself up ("fetch process"). It
// confines itself, reads the request, and writes serve's answer as JSON on fd 3. It returns
// the exit code.
func Main(subcommand, name string, args []string, serve func(req []byte) any) int {
	fatal := func(err error) int {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 3
	}
	c, err := parseConfig(subcommand, args)
	if err != nil {
		return fatal(err)
	}
	if c.Sandbox && !c.confined {
		return fatal(enterSandbox(subcommand, c))
	}
	if !c.Sandbox {
		if err := sandbox.SetLimits(sandbox.Limits{Memory: c.Memory}); err != nil {
			return fatal(err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fatal(err)
	}
	if c.Sandbox {
		if err := sandbox.SeccompNetworked(); err != nil {
			return fatal(err)
		}
	}
	// collect well before the ceiling, so that only an answer asking for more than it fails
	debug.SetMemoryLimit(int64(c.Memory) / 4 * 3)
	req, err := io.ReadAll(io.LimitReader(os.Stdin, maxRequest))
	if err != nil {
		return fatal(fmt.Errorf("reading the request: %w", err))
	}
	out := os.NewFile(3, "answer")
	if err := json.NewEncoder(out).Encode(serve(req)); err != nil {
		return fatal(err)
	}
	return 0
}

// enterSandbox confines this thread (Landlock: read the given trees and the system's TLS roots
// and resolver configuration, write the given trees, TCP allowed) and replaces the process
// with a copy of itself, confined on every thread. It returns only on failure.
func enterSandbox(subcommand string, c Config) error {
	runtime.LockOSThread()
	if err := sandbox.SetLimits(sandbox.Limits{Memory: c.Memory}); err != nil {
		return err
	}
	p := sandbox.Policy{ReadDirs: append(existing(systemDirs), c.Reads...), ReadFiles: existing(systemFiles),
		WriteDirs: c.Writes, Network: true}
	for _, k := range []string{"SSL_CERT_FILE", "SSL_CERT_DIR"} {
		if v := os.Getenv(k); v != "" {
			if st, err := os.Stat(v); err == nil && st.IsDir() {
				p.ReadDirs = append(p.ReadDirs, v)
			} else if err == nil {
				p.ReadFiles = append(p.ReadFiles, v)
			}
		}
	}
	c.confined = true
	return sandbox.Reexec(p, append([]string{subcommand}, c.args()...), passedEnv())
}

// What Go's TLS and DNS read: the system's certificate bundles and resolver configuration.
var (
	systemDirs = []string{"/etc/ssl", "/etc/pki", "/etc/ca-certificates", "/usr/share/ca-certificates",
		"/usr/local/share/ca-certificates", "/etc/certs"}
	systemFiles = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf"}
)

func existing(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}
