// Package sandbox confines a KCL worker process: Landlock gives it read-only access to what the
// render may see and nothing else (no writes, no TCP, signals and abstract sockets scoped), a
// seccomp filter refuses sockets, new processes and debugging syscalls on every thread, and
// resource limits bound what is left.
//
// Landlock restricts the calling thread only. Go's all-threads syscall (which go-landlock uses)
// panics in a process that loaded purego's fake cgo runtime, as a worker does, so a worker
// confines its single locked thread and then re-executes itself: a new process image inherits
// the domain on every thread it will ever have.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ABI returns the Landlock ABI version the kernel offers; 0 means Landlock is unavailable
// (an old kernel, or the LSM not enabled at boot). Tests replace it to stand for such a kernel,
// which this machine is not.
var ABI = kernelABI

func kernelABI() int {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0
	}
	return int(v)
}

// ErrUnavailable is returned by Check on a kernel without Landlock.
var ErrUnavailable = errors.New("the render sandbox needs Linux Landlock (kernel 5.13 or later with " +
	"landlock in the lsm= boot list); it is not available on this kernel")

// Check returns ErrUnavailable when workers cannot be confined.
func Check() error {
	if ABI() < 1 {
		return ErrUnavailable
	}
	return nil
}

// Describe says what a confined worker is denied on this kernel, for logs and metrics.
func Describe() string {
	abi := ABI()
	if abi < 1 {
		return "unavailable"
	}
	parts := []string{fmt.Sprintf("landlock ABI %d", abi), "filesystem read-only to the namespace's staging root",
		"no writes", "seccomp: no sockets, processes, ptrace"}
	if abi >= 4 {
		parts = append(parts, "TCP bind/connect denied")
	}
	if abi >= 6 {
		parts = append(parts, "signals and abstract sockets scoped")
	}
	return strings.Join(parts, ", ")
}

// Policy is what a confined process may read.
type Policy struct {
	// ReadDirs are trees whose files and listings are readable.
	ReadDirs []string
	// ReadFiles are single files readable (a resolver's configuration).
	ReadFiles []string
	// ExecFiles are single files readable and executable: the worker binary, the dynamic loader
	// and the libraries the engine maps.
	ExecFiles []string
	// WriteDirs are trees where files and directories may be read, created, written, linked,
	// renamed and removed (a dependency fetch's cache and staging directory).
	WriteDirs []string
	// Network leaves TCP connect and bind out of the ruleset: a dependency fetch talks to
	// registries (its seccomp filter and address checks still apply).
	Network bool
}

// writeAccess is what WriteDirs grant on this kernel.
func writeAccess(abi int) uint64 {
	a := uint64(unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SYM)
	if abi >= 2 {
		a |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		a |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	return a
}

// handled returns the access rights this kernel can deny; everything handled and not granted by
// a rule is denied.
func handled(abi int, network bool) unix.LandlockRulesetAttr {
	var a unix.LandlockRulesetAttr
	a.Access_fs = unix.LANDLOCK_ACCESS_FS_MAKE_SYM<<1 - 1 // ABI 1: execute … make_sym
	if abi >= 2 {
		a.Access_fs |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		a.Access_fs |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		a.Access_fs |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	if abi >= 4 && !network {
		a.Access_net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
	}
	if abi >= 6 {
		a.Scoped = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
	}
	return a
}

// The size of the ruleset attribute the kernel understands: Scoped exists from ABI 6.
func attrSize(abi int) uintptr {
	switch {
	case abi >= 6:
		return 24
	case abi >= 4:
		return 16
	}
	return 8
}

// RestrictThread sets no_new_privs and enforces p on the calling OS thread. The caller must hold
// the thread (runtime.LockOSThread) and execute the confined program right after.
func RestrictThread(p Policy) error {
	abi := ABI()
	if abi < 1 {
		return ErrUnavailable
	}
	attr := handled(abi, p.Network)
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), attrSize(abi), 0)
	if errno != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	defer unix.Close(int(fd))
	for _, rule := range []struct {
		paths  []string
		access uint64
	}{
		{p.ReadDirs, unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR},
		{p.ReadFiles, unix.LANDLOCK_ACCESS_FS_READ_FILE},
		{p.WriteDirs, writeAccess(abi)},
		{p.ExecFiles, unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_EXECUTE},
	} {
		for _, path := range rule.paths {
			if err := addRule(int(fd), path, rule.access); err != nil {
				return err
			}
		}
	}
	// prctl and landlock_restrict_self act on this thread alone; that is the point (see the
	// package documentation), hence raw syscalls.
	if _, _, errno := unix.RawSyscall6(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", errno)
	}
	if _, _, errno := unix.RawSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}

func addRule(rulesetFD int, path string, access uint64) error {
	f, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("landlock rule for %s: %w", path, err)
	}
	defer unix.Close(f)
	rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(f)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD),
		unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&rule)), 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("landlock rule for %s: %w", path, errno)
	}
	return nil
}

// MappedFiles lists the files mapped into this process (/proc/self/maps): what a re-executed
// copy of it needs to read and execute to load the same libraries.
func MappedFiles() ([]string, error) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var files []string
	for _, line := range strings.Split(string(b), "\n") {
		i := strings.Index(line, " /")
		if i < 0 || strings.HasSuffix(line, "(deleted)") {
			continue
		}
		p := strings.TrimSpace(line[i:])
		if !seen[p] {
			seen[p] = true
			files = append(files, p)
		}
	}
	return files, nil
}

// Reexec confines the calling thread to p, plus read and execute access to this executable and
// every file it maps (so that the copy loads the same libraries), and replaces the process with a
// copy of itself run with args and env: the new image is confined on every thread it will ever
// have. The caller must hold the thread (runtime.LockOSThread). It returns only on failure.
func Reexec(p Policy, args, env []string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	files, err := MappedFiles()
	if err != nil {
		return err
	}
	// The dynamic loader looks libraries up in its cache before mapping them.
	if _, err := os.Stat("/etc/ld.so.cache"); err == nil {
		files = append(files, "/etc/ld.so.cache")
	}
	p.ExecFiles = append(append(p.ExecFiles, files...), exe)
	if err := RestrictThread(p); err != nil {
		return err
	}
	return unix.Exec(exe, append([]string{exe}, args...), env)
}
