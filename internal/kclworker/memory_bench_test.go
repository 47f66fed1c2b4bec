package kclworker_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/procstatus"
)

// BenchmarkWarmWorkerMemory renders b.N different programs in one confined worker, as the
// controller renders a namespace's KCLArtifacts, and reports what the warm worker then keeps
// (/proc/PID/status): anon-MiB is RssAnon, its private memory, which the pool's idle-memory bound
// counts; rss-MiB is VmRSS, which adds the file pages it maps (the binary and the engine library,
// shared by every worker and with the page cache). Two worker commands: the kcl-worker binary
// beside the controller (what the pool starts when it is there) and the controller binary itself
// with the worker subcommand; both from `make build` (bin/, or beside $KCL_BINARY).
func BenchmarkWarmWorkerMemory(b *testing.B) {
	controller := os.Getenv("KCL_BINARY")
	if controller == "" {
		controller = filepath.Join("..", "..", "bin", "kcl-artifact-controller")
	}
	controller, err := filepath.Abs(controller)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cmd  []string
	}{
		{kclworker.WorkerBinary, []string{filepath.Join(filepath.Dir(controller), kclworker.WorkerBinary), kclworker.Subcommand}},
		{"controller", []string{controller, kclworker.Subcommand}},
	} {
		b.Run(c.name, func(b *testing.B) {
			if _, err := os.Stat(c.cmd[0]); err != nil {
				b.Skipf("%v (make build)", err)
			}
			benchWorkerMemory(b, c.cmd)
		})
	}
}

func benchWorkerMemory(b *testing.B, cmd []string) {
	root := b.TempDir()
	files := make([]string, b.N)
	for i := range files {
		files[i] = filepath.Join(root, fmt.Sprintf("p%d", i), "main.k")
		if err := os.MkdirAll(filepath.Dir(files[i]), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(files[i], []byte(variedProgram(i)), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	p, err := kclworker.New(kclworker.Options{Size: 1, Sandbox: true, LibPath: libPath(b), Command: cmd})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	d := kclworker.Domain{Name: "bench", Roots: []string{root}}
	b.ResetTimer()
	for i := range b.N {
		s := p.Session(d, filepath.Dir(files[i]))
		call := func(m string, a []byte) ([]byte, error) { return s.Call(context.Background(), m, a) }
		res, err := kcllib.ExecProgram(call, &kcllib.ExecProgramArgs{KFilenameList: []string{files[i]}})
		if err != nil {
			b.Fatal(err)
		}
		if !strings.Contains(res.YAMLResult, "kind: ConfigMap") {
			b.Fatalf("program %d rendered no ConfigMap:\n%.300s", i, res.YAMLResult)
		}
	}
	b.StopTimer()
	pids := p.IdlePIDs(d.Name)
	if len(pids) != 1 {
		b.Fatalf("want one warm worker after %d renders, got %d", b.N, len(pids))
	}
	st, err := procstatus.Bytes(pids[0], "RssAnon", "VmRSS")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(st["RssAnon"])/(1<<20), "anon-MiB")
	b.ReportMetric(float64(st["VmRSS"])/(1<<20), "rss-MiB")
}

// variedProgram is the i-th of programs that differ in their schemas, names, sizes and strings,
// so that a worker's engine sees a new program on every render (as a namespace's KCLArtifacts
// with their own sources are).
func variedProgram(i int) string {
	return fmt.Sprintf(`schema Config%[1]d:
    name: str
    replicas: int = %[2]d
    labels: {str:str} = {"app": name, "index": "%[1]d"}

configs = [Config%[1]d {name = "app-%[1]d-${n}"} for n in range(%[3]d)]
manifests = [{
    apiVersion = "v1"
    kind = "ConfigMap"
    metadata = {name = c.name, labels = c.labels}
    data = {replicas = str(c.replicas), payload = "%[4]s"}
} for c in configs]
`, i, i%5+1, 5+i%40, strings.Repeat("x", 10+(i*37)%500))
}
