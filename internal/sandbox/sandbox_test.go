package sandbox

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// The confinement itself is tested through real workers (internal/kclworker); these check what
// the worker builds its policy from.

func TestLandlockIsAvailableHere(t *testing.T) {
	if err := Check(); err != nil {
		t.Fatalf("this machine must offer Landlock for the sandbox tests to mean anything: %v", err)
	}
	if d := Describe(); !strings.HasPrefix(d, "landlock ABI ") {
		t.Fatalf("Describe: %q", d)
	}
}

func TestMappedFilesIncludeTheExecutable(t *testing.T) {
	files, err := MappedFiles()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, exe) {
		t.Fatalf("%s not among the mapped files %v", exe, files)
	}
	for _, f := range files {
		if !strings.HasPrefix(f, "/") {
			t.Fatalf("not a path: %q", f)
		}
	}
}

func TestDescribeWithoutLandlock(t *testing.T) {
	saved := ABI
	ABI = func() int { return 0 }
	defer func() { ABI = saved }()
	if Check() != ErrUnavailable || Describe() != "unavailable" {
		t.Fatal("a kernel without Landlock must be reported")
	}
}
