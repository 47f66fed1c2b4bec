package kubenode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// The node lives in a network namespace and a mount namespace made for it, both pinned by bind
// mounts so that every component enters the same pair and teardown can find them after a
// crash. Pod and Service addresses exist only inside the network namespace; the mount namespace
// is rshared there (kubelet's volume mounts must reach containerd and runc) and private towards
// the machine, so nothing the node mounts is seen outside it.

func (n *Node) netnsPath() string { return "/run/netns/" + n.netnsName() }

// NetnsPath is the node's network namespace (/run/netns/kcl-<name>), for a process to run in
// with `nsenter --net=<path>`: it reaches Pod and Service addresses and listens on NodeIP.
func (n *Node) NetnsPath() string { return n.netnsPath() }

func (n *Node) netnsName() string { return "kcl-" + n.opts.Name }
func (n *Node) mntnsPath() string { return filepath.Join(n.RunDir, "mntns") }

func (n *Node) createNamespaces() error {
	steps := [][]string{
		{"ip", "netns", "add", n.netnsName()},
		{"ip", "-n", n.netnsName(), "link", "set", "lo", "up"},
		{"ip", "-n", n.netnsName(), "addr", "add", NodeIP + "/32", "dev", "lo"},
		// Service addresses need a route for the node's own clients (the lookup comes before
		// kube-proxy's DNAT); there is no default route: nothing leaves the namespace
		{"ip", "-n", n.netnsName(), "route", "add", ServiceCIDR, "dev", "lo", "src", NodeIP},
		{"nsenter", "--net=" + n.netnsPath(), "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		// a private mount of RunDir can hold the mount namespace's pin (a shared one would
		// let the pin propagate into the namespace it pins, which the kernel refuses)
		{"mount", "--bind", n.RunDir, n.RunDir},
		{"mount", "--make-private", n.RunDir},
		{"touch", n.mntnsPath()},
		{"unshare", "--mount=" + n.mntnsPath(), "--propagation", "private", "true"},
		{"nsenter", "--mount=" + n.mntnsPath(), "mount", "--make-rshared", "/"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	return nil
}

// enter prefixes a command so that it runs inside the node's namespaces. nsenter execs the
// command, so the PID is the command's own.
func (n *Node) enter(args ...string) []string {
	return append([]string{"nsenter", "--net=" + n.netnsPath(), "--mount=" + n.mntnsPath(), "--"}, args...)
}

// DialContext connects from inside the node's network namespace: to Pod and Service addresses,
// the node IP, or the namespace's own loopback.
func (n *Node) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := inNetns(n.netnsPath(), func() (err error) {
		conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

// Listen opens a listener inside the node's network namespace, for servers that Pods reach at
// the node IP (a Git server, a registry).
func (n *Node) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := inNetns(n.netnsPath(), func() (err error) {
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// inNetns runs fn on a thread moved into the network namespace netns: sockets fn makes belong
// there for their whole life, while the thread returns to the caller's namespace afterwards.
func inNetns(netns string, fn func() error) error {
	target, err := os.Open(netns)
	if err != nil {
		return err
	}
	defer target.Close()
	runtime.LockOSThread()
	own, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer own.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering %s: %w", netns, err)
	}
	fnErr := fn()
	if err := unix.Setns(int(own.Fd()), unix.CLONE_NEWNET); err != nil {
		// the thread stays locked, and dies with this goroutine rather than run others in the
		// wrong namespace
		return fmt.Errorf("returning from %s: %w (after: %v)", netns, err, fnErr)
	}
	runtime.UnlockOSThread()
	return fnErr
}

// removeNamespaces undoes createNamespaces; what is already gone is no error.
func removeNamespaces(runDir, netnsName string) error {
	var errs []error
	mntns := filepath.Join(runDir, "mntns")
	for _, m := range []string{mntns, runDir} {
		if mounted(m) {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
			}
		}
	}
	if _, err := os.Stat("/run/netns/" + netnsName); err == nil {
		if err := run("ip", "netns", "delete", netnsName); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// mounted reports whether path is a mount point in this process's mount namespace.
func mounted(path string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMountPath(f[4]) == path {
			return true
		}
	}
	return false
}

// unescapeMountPath undoes mountinfo's octal escapes of space, tab, newline and backslash.
func unescapeMountPath(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
