package fluxenv

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"
)

// ProcStat is what the tools of this repository read of /proc/<pid>/stat.
type ProcStat struct {
	State          byte // R, S, D, Z (zombie), X (dead), ...
	PPID, Session  int
	PGRP           int    // process group: a child started by a fluxenv Process inherits its group
	UTime, STime   uint64 // the process's own CPU, in clock ticks
	CUTime, CSTime uint64 // CPU of its children that it has waited for (reaped)
	Start          uint64 // start time in clock ticks since boot: tells a process from a reused PID
}

// CPU is the process's own CPU time, in clock ticks.
func (s ProcStat) CPU() uint64 { return s.UTime + s.STime }

// Gone tells a zombie or dead process.
func (s ProcStat) Gone() bool { return s.State == 'Z' || s.State == 'X' }

// ReadProcStat reads /proc/<pid>/stat.
func ReadProcStat(pid int) (ProcStat, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ProcStat{}, err
	}
	// the command (field 2) is in parentheses and may contain spaces and parentheses
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return ProcStat{}, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is field 3 (state); field n is f[n-3]
	if len(f) < 20 || len(f[0]) != 1 {
		return ProcStat{}, errors.New("malformed /proc stat")
	}
	u := func(field int) uint64 {
		v, _ := strconv.ParseUint(f[field-3], 10, 64)
		return v
	}
	return ProcStat{
		State: f[0][0], PPID: int(u(4)), PGRP: int(u(5)), Session: int(u(6)),
		UTime: u(14), STime: u(15), CUTime: u(16), CSTime: u(17), Start: u(22),
	}, nil
}

// EachProcess calls fn with every process's PID and stat (processes that vanish meanwhile are
// skipped).
func EachProcess(fn func(pid int, s ProcStat)) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if s, err := ReadProcStat(pid); err == nil {
			fn(pid, s)
		}
	}
}

// Cmdline is the command line of pid, arguments separated by spaces.
func Cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}
