package sandbox

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// denied are refused with EPERM on every thread of a confined worker. A render needs none of them:
// no network (net.fqdn must not carry data out by DNS), no new programs or processes, no
// inspection of other processes, no new kernel attack surface.
var denied = append([]string{
	"socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "sendto", "sendmsg", "sendmmsg"},
	deniedAlways...)

// deniedAlways are refused to a dependency fetch too, which needs the network and nothing else
// on this list.
var deniedAlways = []string{
	"execve", "execveat", "fork", "vfork",
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open", "pidfd_getfd", "kcmp",
	"unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
	"bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
	"acct", "swapon", "swapoff", "syslog", "quotactl", "personality",
}

// errnoENOSYS makes glibc fall back from clone3 (whose flags a filter cannot read) to clone.
const errnoENOSYS = seccomp.Action(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))

// Seccomp installs the filter on every thread of the process (TSYNC). New threads are allowed;
// a clone without CLONE_THREAD, that is a new process, is not.
func Seccomp() error { return loadFilter(denied) }

// SeccompNetworked is Seccomp with sockets allowed, for a dependency fetch.
func SeccompNetworked() error { return loadFilter(deniedAlways) }

func loadFilter(denied []string) error {
	return seccomp.LoadFilter(seccomp.Filter{
		NoNewPrivs: true,
		Flag:       seccomp.FilterFlagTSync,
		Policy: seccomp.Policy{
			DefaultAction: seccomp.ActionAllow,
			Syscalls: []seccomp.SyscallGroup{
				{Action: seccomp.ActionErrno, Names: denied},
				{Action: seccomp.ActionErrno, NamesWithCondtions: []seccomp.NameWithConditions{{
					Name: "clone", Conditions: []seccomp.Condition{
						{Argument: 0, Operation: seccomp.BitsNotSet, Value: unix.CLONE_THREAD}},
				}}},
				{Action: errnoENOSYS, Names: []string{"clone3"}},
			},
		},
	})
}

// Limits are a confined worker's resource limits.
type Limits struct {
	// Memory bounds the worker's data (heap and anonymous mappings: RLIMIT_DATA), in bytes.
	Memory uint64
	// Confined adds the limits of a sandboxed worker: small files, few descriptors.
	Confined bool
}

type rlimit struct {
	res int
	val uint64
}

// SetLimits applies the limits: memory, no core dumps, and when confined small files and few
// descriptors. RLIMIT_NPROC is left alone: it counts every process of the user, the controller's
// included, so a small value would starve the controller; the seccomp filter refuses new
// processes instead.
func SetLimits(l Limits) error {
	set := []rlimit{{unix.RLIMIT_CORE, 0}}
	if l.Memory > 0 {
		set = append(set, rlimit{unix.RLIMIT_DATA, l.Memory})
	}
	if l.Confined {
		set = append(set, rlimit{unix.RLIMIT_FSIZE, 1 << 20}, rlimit{unix.RLIMIT_NOFILE, 256})
	}
	for _, s := range set {
		if err := unix.Setrlimit(s.res, &unix.Rlimit{Cur: s.val, Max: s.val}); err != nil {
			return fmt.Errorf("setrlimit(%d): %w", s.res, err)
		}
	}
	return nil
}
