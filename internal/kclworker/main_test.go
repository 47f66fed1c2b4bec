package kclworker_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
)

// The test binary doubles as the worker: the pool re-executes it with the hidden subcommand.
func TestMain(m *testing.M) {
	kclworker.ServeIfWorker()
	kclworker.ServeForgingWorker()
	os.Exit(m.Run())
}

// libPath finds the engine library the Makefile fetched (make libkcl).
func libPath(tb testing.TB) string {
	p, err := kcllib.Find(filepath.Join("..", "..", "bin", kcllib.LibName))
	if os.Getenv(kcllib.EnvLib) != "" {
		p, err = kcllib.Find("")
	}
	if err != nil {
		tb.Fatalf("the KCL engine is needed for this test: %v", err)
	}
	return p
}

func newPool(tb testing.TB, o kclworker.Options) *kclworker.Pool {
	tb.Helper()
	o.LibPath = libPath(tb)
	o.Command = []string{os.Args[0], kclworker.Subcommand}
	p, err := kclworker.New(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	return p
}

func writeProgram(tb testing.TB, code string) string {
	tb.Helper()
	dir := tb.TempDir()
	f := filepath.Join(dir, "main.k")
	if err := os.WriteFile(f, []byte(code), 0o644); err != nil {
		tb.Fatal(err)
	}
	return f
}
