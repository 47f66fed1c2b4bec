package childproc

import (
	"fmt"
	"os"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
)

// Limits bound the children of one kind: each one's memory and time, whether they are
// confined, how many run at once in all and for one domain (a namespace, so that a tenant whose
// servers stall holds at most PerDomain of them), and how they are started.
type Limits struct {
	// MemoryLimit bounds a child's data (RLIMIT_DATA), in bytes.
	MemoryLimit uint64
	// Timeout bounds one child; it is killed after it.
	Timeout time.Duration
	// Sandbox confines children (Landlock and seccomp).
	Sandbox bool
	// Size bounds the children running at once, PerDomain those of one domain.
	Size, PerDomain int
	// Command starts a child; it defaults to this executable with the kind's subcommand.
	Command []string
}

// WithDefaults is l with what is unset taken from d, PerDomain a share of Size, and Command
// this executable with subcommand.
func (l Limits) WithDefaults(subcommand string, d Limits) (Limits, error) {
	if l.MemoryLimit == 0 {
		l.MemoryLimit = d.MemoryLimit
	}
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	if l.Size <= 0 {
		l.Size = d.Size
	}
	l.PerDomain = fairshare.Share(l.Size, l.PerDomain)
	if len(l.Command) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return l, fmt.Errorf("locating this executable to start %s: %w", subcommand, err)
		}
		l.Command = []string{exe, subcommand}
	}
	return l, nil
}

// ServeIf runs the child's request and exits when this process was started as a child of
// subcommand; main (and TestMain of packages that start such children) calls it first.
func ServeIf(subcommand, name string, serve func(req []byte) any) {
	if len(os.Args) > 1 && os.Args[1] == subcommand {
		os.Exit(Main(subcommand, name, os.Args[2:], serve))
	}
}
