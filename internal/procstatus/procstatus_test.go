package procstatus

import (
	"os"
	"testing"
)

func TestBytesOfThisProcess(t *testing.T) {
	m, err := Bytes(os.Getpid(), "VmRSS", "VmHWM", "RssAnon")
	if err != nil {
		t.Fatal(err)
	}
	// a Go test binary keeps at least a MiB, and its peak is at least what it keeps now
	if m["VmRSS"] < 1<<20 || m["VmHWM"] < m["VmRSS"] || m["RssAnon"] == 0 || m["RssAnon"] > m["VmRSS"] {
		t.Fatalf("implausible figures in bytes: %v", m)
	}
	if _, err := Bytes(os.Getpid(), "VmRSS", "NoSuchField"); err == nil {
		t.Fatal("a field the kernel does not give was not an error")
	}
}
