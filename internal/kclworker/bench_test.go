package kclworker_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
)

// The benchmarks render fixtures/bench (51 Kubernetes objects) five ways; `make bench` prints
// the ratios of the warm pool, confined or not, to the in-process call, which exists only here.
// Warm ones run before cold ones: hundreds of cold workers exiting would slow whatever runs next.

func benchArgs(b *testing.B) *kcllib.ExecProgramArgs {
	f, err := filepath.Abs(filepath.Join("..", "..", "fixtures", "bench", "main.k"))
	if err != nil {
		b.Fatal(err)
	}
	return &kcllib.ExecProgramArgs{KFilenameList: []string{f}}
}

func checkObjects(b *testing.B, res *kcllib.ExecProgramResult) {
	if n := strings.Count(res.YAMLResult, "\nkind: "); n != 51 {
		b.Fatalf("want 51 objects, got %d", n)
	}
}

func BenchmarkRenderInProcess(b *testing.B) {
	lib, err := kcllib.Load(libPath(b))
	if err != nil {
		b.Fatal(err)
	}
	svc := lib.NewService()
	defer svc.Close()
	args := benchArgs(b)
	b.ResetTimer()
	for range b.N {
		res, err := kcllib.ExecProgram(svc.Call, args)
		if err != nil {
			b.Fatal(err)
		}
		checkObjects(b, res)
	}
}

func BenchmarkRenderWarmPool(b *testing.B) {
	p := newPool(b, kclworker.Options{Size: 1})
	if err := p.Warm(kclworker.Domain{}); err != nil {
		b.Fatal(err)
	}
	benchPool(b, p)
}

// BenchmarkRenderWarmConfined renders in a warm worker confined to the fixture's directory,
// as the controller renders for a namespace.
func BenchmarkRenderWarmConfined(b *testing.B) {
	p := newPool(b, kclworker.Options{Size: 1, Sandbox: true})
	d := benchDomain(b)
	if err := p.Warm(d); err != nil {
		b.Fatal(err)
	}
	benchEngine(b, p.Session(d, d.Roots[0]))
}

// BenchmarkRenderColdWorker pays for a new worker process on every render.
func BenchmarkRenderColdWorker(b *testing.B) {
	p := newPool(b, kclworker.Options{Size: 1, MaxCalls: 1})
	benchPool(b, p)
}

// BenchmarkRenderColdConfined pays for a new confined worker (start, engine load, Landlock,
// re-execution, engine load again, seccomp) on every render.
func BenchmarkRenderColdConfined(b *testing.B) {
	p := newPool(b, kclworker.Options{Size: 1, MaxCalls: 1, Sandbox: true})
	d := benchDomain(b)
	benchEngine(b, p.Session(d, d.Roots[0]))
}

func benchDomain(b *testing.B) kclworker.Domain {
	dir, err := filepath.Abs(filepath.Join("..", "..", "fixtures", "bench"))
	if err != nil {
		b.Fatal(err)
	}
	return kclworker.Domain{Name: "bench", Roots: []string{dir}}
}

type engine interface {
	Call(ctx context.Context, method string, args []byte) ([]byte, error)
}

func benchPool(b *testing.B, p *kclworker.Pool) { benchEngine(b, p) }

func benchEngine(b *testing.B, e engine) {
	args := benchArgs(b)
	call := func(m string, a []byte) ([]byte, error) { return e.Call(context.Background(), m, a) }
	b.ResetTimer()
	for range b.N {
		res, err := kcllib.ExecProgram(call, args)
		if err != nil {
			b.Fatal(err)
		}
		checkObjects(b, res)
	}
}
