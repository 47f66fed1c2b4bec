// Package procstatus reads the memory figures of a process from /proc/<pid>/status, where the
// kernel gives them in kB: VmRSS, VmHWM (the peak, file pages of the binary and its libraries
// included) and RssAnon (the private part, what an idle worker really keeps).
package procstatus

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Bytes returns the named fields of /proc/<pid>/status in bytes; a field the kernel does not
// give is an error.
func Bytes(pid int, keys ...string) (map[string]uint64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		for _, want := range keys {
			if fs := strings.Fields(v); k == want && len(fs) > 0 {
				n, err := strconv.ParseUint(fs[0], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("/proc/%d/status: %s: %w", pid, k, err)
				}
				out[k] = n << 10
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if _, ok := out[k]; !ok {
			return nil, fmt.Errorf("/proc/%d/status has no %s", pid, k)
		}
	}
	return out, nil
}
