package kclworker_test

import (
	"syscall"
	"testing"
	"time"
)

// killPID kills a process and waits until it is gone, so the pool finds it dead.
func killPID(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not die", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
