package kubenode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// What the node changes on the machine itself, outside its namespaces: cgroups in every v1
// hierarchy, and the kernel tunables kubelet sets for the whole machine.

const cgroupFS = "/sys/fs/cgroup"

// kubeletSysctls are the machine-wide tunables kubelet's setupKernelTunables writes.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// cgroupHierarchies are the mounted hierarchies under /sys/fs/cgroup (v1 controllers, the named
// systemd one and the hybrid unified one).
func cgroupHierarchies() []string {
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range entries {
		p := filepath.Join(cgroupFS, e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			dirs = append(dirs, p)
		}
	}
	return dirs
}

// createCgroupRoot makes kubelet's cgroupRoot in every hierarchy; cpuset children start empty
// and must be given their parent's CPUs and memory nodes before a task may join.
func createCgroupRoot(root string) error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return fmt.Errorf("writing %s/%s: %w", dir, f, err)
			}
		}
	}
	return nil
}

// cgroupPIDs lists the processes in root's subtree of every hierarchy.
func cgroupPIDs(root string) []int {
	seen := map[int]bool{}
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
			return nil
		})
	}
	pids := make([]int, 0, len(seen))
	for pid := range seen {
		pids = append(pids, pid)
	}
	return pids
}

// removeCgroupRoot removes root's subtree in every hierarchy, deepest first. Frozen cgroups are
// thawed so that their killed tasks can exit.
func removeCgroupRoot(root string) error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if filepath.Base(h) == "freezer" {
				_ = os.WriteFile(filepath.Join(d, "freezer.state"), []byte("THAWED"), 0o644)
			}
			if err := rmdirRetry(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// rmdirRetry retries EBUSY for a moment: a cgroup stays busy until its last task is reaped.
func rmdirRetry(dir string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s: %w", dir, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// saveSysctls records the tunables kubelet will change, unless a record exists: after a crash the
// record holds the values from before the crashed run, which are the ones to restore.
func saveSysctls(file string) error {
	if _, err := os.Stat(file); err == nil {
		return nil
	}
	vals := map[string]string{}
	for _, k := range kubeletSysctls {
		v, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return err
		}
		vals[k] = strings.TrimSpace(string(v))
	}
	data, err := json.Marshal(vals)
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o644)
}

// restoreSysctls writes the recorded values back and removes the record.
func restoreSysctls(file string) error {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var vals map[string]string
	if err := json.Unmarshal(data, &vals); err != nil {
		return fmt.Errorf("reading %s: %w", file, err)
	}
	var errs []error
	for k, v := range vals {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		errs = append(errs, os.Remove(file))
	}
	return errors.Join(errs...)
}

// processesOfNode finds every process that belongs to the node: those in its mount namespace
// (the components and containerd's shims) and those in its cgroups (the containers).
func processesOfNode(mntns, cgroupRoot string) []int {
	var ns uint64
	var st unix.Stat_t
	if err := unix.Stat(mntns, &st); err == nil {
		ns = st.Ino
	}
	pids := cgroupPIDs(cgroupRoot)
	if ns == 0 {
		return pids
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var pst unix.Stat_t
		if unix.Stat("/proc/"+e.Name()+"/ns/mnt", &pst) == nil && pst.Ino == ns && st.Dev == pst.Dev {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killAll SIGKILLs pids and waits until none is left (or reports those that are).
func killAll(pids []int) error {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		var alive []string
		for _, pid := range pids {
			if processAlive(pid) {
				alive = append(alive, strconv.Itoa(pid))
			}
		}
		if len(alive) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes still alive after SIGKILL: %s", strings.Join(alive, " "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func processAlive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(data), ')')
	return i < 0 || i+2 >= len(data) || (data[i+2] != 'Z' && data[i+2] != 'X')
}
