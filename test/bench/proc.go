package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/procstatus"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// clockTicks is USER_HZ, the unit of the times in /proc/<pid>/stat: 100 on every Linux
// architecture Go supports (it is fixed by the kernel ABI, not by CONFIG_HZ).
const clockTicks = 100

func ticksToDuration(t uint64) time.Duration {
	return time.Duration(t) * time.Second / clockTicks
}

// procStat is what the harness reads of /proc/<pid>/stat.
type procStat = fluxenv.ProcStat

func readStat(pid int) (procStat, error) { return fluxenv.ReadProcStat(pid) }

// childKey identifies a child process across PID reuse.
type childKey struct {
	pid   int
	start uint64
}

// childrenOf lists the processes whose parent is ppid, with their stat.
func childrenOf(ppid int) map[childKey]procStat {
	out := map[childKey]procStat{}
	fluxenv.EachProcess(func(pid int, s procStat) {
		if s.PPID == ppid {
			out[childKey{pid, s.Start}] = s
		}
	})
	return out
}

// cpuSnap is the CPU of the controller and its workers at one moment.
//
// Worker CPU method: the workers are the controller's child processes (it starts them itself;
// a sandboxed worker re-executes in place, keeping its PID). The CPU of the workers alive at a
// moment is the sum of their utime+stime from /proc/<pid>/stat; a worker that exited and was
// reaped (waited for) by the controller adds its whole CPU to the controller's cutime+cstime.
// Over an interval [0,1]:
//
//	worker CPU = Σ children alive at 1 of (cpu₁ − cpu₀, where cpu₀ = 0 for a child born after 0)
//	           + Δ(controller cutime+cstime)
//	           − Σ children alive at 0 but gone at 1 of cpu₀   (their cutime share before 0)
//
// A child that was born and reaped between two samples is counted through cutime alone.
type cpuSnap struct {
	at       time.Time
	ctrl     procStat
	children map[childKey]uint64 // utime+stime of each live child
}

func workerTicks(a, b cpuSnap) uint64 {
	var t int64
	for k, cpu := range b.children {
		t += int64(cpu) - int64(a.children[k])
	}
	t += int64((b.ctrl.CUTime + b.ctrl.CSTime)) - int64((a.ctrl.CUTime + a.ctrl.CSTime))
	for k, cpu := range a.children {
		if _, alive := b.children[k]; !alive {
			t -= int64(cpu)
		}
	}
	if t < 0 {
		return 0
	}
	return uint64(t)
}

// sampler watches the controller process and its children: every poll it records the highest
// worker RSS (VmHWM of each child: the peak of its RSS since it started, which catches what
// happens between polls), the highest worker RssAnon and the highest sum of the workers' RssAnon
// at one poll, and the distinct workers started since the phase began. RSS counts the file pages
// a worker maps (its binary, the engine library), which every worker shares with the others and
// with the page cache; RssAnon is its own memory, what the pool's idle-memory bound counts (the
// kernel has no peak of it: it is sampled, so a peak between polls is missed).
type sampler struct {
	pid int

	mu             sync.Mutex
	peakWorkerRSS  uint64
	peakWorkerAnon uint64            // the highest RssAnon of one worker
	peakAnonSum    uint64            // the highest sum of the workers' RssAnon at one poll
	baseline       map[childKey]bool // the children alive when the phase began
	seen           map[childKey]bool // children seen since, not in baseline
}

func newSampler(pid int) *sampler {
	return &sampler{pid: pid, baseline: map[childKey]bool{}, seen: map[childKey]bool{}}
}

// snapshot reads the controller and its children now, updating the peaks.
func (s *sampler) snapshot() (cpuSnap, error) {
	ctrl, err := readStat(s.pid)
	if err != nil {
		return cpuSnap{}, fmt.Errorf("controller process %d: %w", s.pid, err)
	}
	if ctrl.Gone() {
		return cpuSnap{}, fmt.Errorf("controller process %d has exited", s.pid)
	}
	snap := cpuSnap{at: time.Now(), ctrl: ctrl, children: map[childKey]uint64{}}
	var peak, peakAnon, anonSum uint64
	for k, st := range childrenOf(s.pid) {
		snap.children[k] = st.CPU()
		// A child between fork and exec shares the controller's memory (os/exec uses
		// CLONE_VM|CLONE_VFORK): only a worker that runs as one counts for the worker RSS.
		if st.State == 'Z' || !isWorker(k.pid) {
			continue
		}
		if m, err := procstatus.Bytes(k.pid, "VmRSS", "VmHWM", "RssAnon"); err == nil {
			peak = max(peak, m["VmRSS"], m["VmHWM"])
			peakAnon = max(peakAnon, m["RssAnon"])
			anonSum += m["RssAnon"]
		}
	}
	s.mu.Lock()
	s.peakWorkerRSS = max(s.peakWorkerRSS, peak)
	s.peakWorkerAnon = max(s.peakWorkerAnon, peakAnon)
	s.peakAnonSum = max(s.peakAnonSum, anonSum)
	for k := range snap.children {
		if !s.baseline[k] {
			s.seen[k] = true
		}
	}
	s.mu.Unlock()
	return snap, nil
}

// isWorker reports whether the process runs as a KCL worker: its argv[1] is the worker
// subcommand (before its exec, a child shows the controller's command line).
func isWorker(pid int) bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(string(cmdline), "\x00")
	return len(args) > 1 && args[1] == kclworker.Subcommand
}

// reset starts a new phase: peaks and the workers seen start over; the workers alive now are
// not new.
func (s *sampler) reset() {
	live := childrenOf(s.pid)
	s.mu.Lock()
	s.peakWorkerRSS, s.peakWorkerAnon, s.peakAnonSum = 0, 0, 0
	s.baseline = map[childKey]bool{}
	for k := range live {
		s.baseline[k] = true
	}
	s.seen = map[childKey]bool{}
	s.mu.Unlock()
}

// peaks returns the highest worker RSS and the number of workers started, as far as sampling
// saw them, since reset.
func (s *sampler) peaks() (workerRSS uint64, workersSeen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakWorkerRSS, len(s.seen)
}

// anonPeaks returns the highest RssAnon of one worker, and of all workers together at one poll,
// since reset.
func (s *sampler) anonPeaks() (worker, all uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakWorkerAnon, s.peakAnonSum
}

// controllerHWM is the controller's peak RSS since it started (VmHWM).
func (s *sampler) controllerHWM() uint64 {
	m, err := procstatus.Bytes(s.pid, "VmHWM")
	if err != nil {
		return 0
	}
	return m["VmHWM"]
}

// otherCPU reads the CPU (utime+stime) of other processes by name: the harness itself, the
// control plane and the Flux controllers, to show where the machine's cores went.
func otherCPU(pids map[string]int) map[string]uint64 {
	out := map[string]uint64{}
	for name, pid := range pids {
		if st, err := readStat(pid); err == nil {
			out[name] = st.CPU()
		}
	}
	return out
}

// machineBusyTicks is the time every CPU of the machine spent on anything but idling and waiting
// for I/O (the first line of /proc/stat: user, nice, system, irq, softirq, steal), in ticks; 0
// when unknown.
func machineBusyTicks() uint64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, _ := strconv.ParseUint(f[i], 10, 64)
		busy += v
	}
	return busy
}
