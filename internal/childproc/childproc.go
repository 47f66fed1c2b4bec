// Package childproc runs one request of a tenant's in a child process where what a hostile
// server sends can only fail that request: this executable re-executed with a hidden
// subcommand, under a memory ceiling (RLIMIT_DATA), killed at its deadline and when its parent
// dies, and, sandboxed, confined by Landlock (read and write only the trees it is given) and
// seccomp (no new processes, no ptrace). The request goes on stdin, so that credentials never
// travel as arguments, which other processes can read; the answer comes back as JSON on fd 3,
// bounded, so that nothing the child printed is ever parsed or quoted as an answer.
//
// Dependency fetches (internal/depfetch) and OCI pushes (internal/ocipush) are such children.
package childproc

import (
	"flag"
	"io"
	"os"
	"strconv"
)

// Config is how a child is confined. The child receives it as arguments; the request itself
// comes on stdin.
type Config struct {
	// Memory bounds the child's data (RLIMIT_DATA), in bytes.
	Memory uint64
	// Sandbox confines the child with Landlock and seccomp; it then reads Reads and the system's
	// TLS roots and resolver configuration, and writes Writes, nothing else.
	Sandbox bool
	// Reads and Writes are the trees the sandboxed child may read, and read and write.
	Reads, Writes []string

	// confined: the re-executed child, already inside the sandbox.
	confined bool
}

func (c Config) args() []string {
	a := []string{"--memory=" + strconv.FormatUint(c.Memory, 10)}
	for _, r := range c.Reads {
		a = append(a, "--read="+r)
	}
	for _, w := range c.Writes {
		a = append(a, "--write="+w)
	}
	if c.Sandbox {
		a = append(a, "--sandbox")
	}
	if c.confined {
		a = append(a, "--confined")
	}
	return a
}

func parseConfig(name string, args []string) (Config, error) {
	var c Config
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Uint64Var(&c.Memory, "memory", 256<<20, "")
	fs.Func("read", "", func(v string) error { c.Reads = append(c.Reads, v); return nil })
	fs.Func("write", "", func(v string) error { c.Writes = append(c.Writes, v); return nil })
	fs.BoolVar(&c.Sandbox, "sandbox", false, "")
	fs.BoolVar(&c.confined, "confined", false, "")
	return c, fs.Parse(args)
}

// passedEnv is the environment a child gets: where the TLS roots are, nothing else.
func passedEnv() []string {
	var env []string
	for _, k := range []string{"SSL_CERT_FILE", "SSL_CERT_DIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
