package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/render"
	"github.com/kcl-flux/kcl-artifact-controller/internal/staging"
)

// measureFloor renders the bench program in-process as the controller does (a sandboxed
// kclworker.Pool, a fresh staging directory per render in the namespace's staging root, the
// render package), warmups times, then runs more renders and returns their median: the warm
// render time, the least a render can cost the controller.
func measureFloor(ctx context.Context, dir string, warmups, runs int, logf func(string, ...any)) (time.Duration, error) {
	lib, err := kcllib.Find("")
	if err != nil {
		return 0, err
	}
	area, err := staging.New(filepath.Join(dir, "staging"))
	if err != nil {
		return 0, err
	}
	defer area.Close()
	// The worker is this executable (main calls kclworker.ServeIfWorker), so the pool and the
	// worker are the same code.
	pool, err := kclworker.New(kclworker.Options{Size: 1, Sandbox: true, LibPath: lib})
	if err != nil {
		return 0, err
	}
	defer pool.Close()

	const ns = "bench-floor"
	renderOnce := func(i int) (time.Duration, error) {
		stage, err := area.New(ns)
		if err != nil {
			return 0, err
		}
		defer stage.Remove()
		if err := os.MkdirAll(stage.Source(), 0o755); err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(stage.Source(), "main.k"), []byte(program("1")), 0o644); err != nil {
			return 0, err
		}
		name := fmt.Sprintf("app-%04d", i)
		args := []render.Argument{{Name: "name", Value: name}, {Name: "namespace", Value: ns},
			{Name: "replicas", Value: strconv.Itoa(i%5 + 1)}}
		session := pool.Session(kclworker.Domain{Name: ns, Roots: []string{stage.NamespaceRoot}}, stage.Source())
		session.YAMLOnly = true
		start := time.Now()
		res, err := render.Render(ctx, session, render.Options{Root: stage.Path, Dir: stage.Source(),
			Arguments: args, Format: render.FormatYAML})
		took := time.Since(start)
		if err != nil {
			return 0, fmt.Errorf("rendering the bench program: %w", err)
		}
		if !strings.Contains(res.Output, "kind: Deployment") || !strings.Contains(res.Output, "name: "+name) {
			return 0, fmt.Errorf("unexpected output of the bench program:\n%s", res.Output)
		}
		return took, nil
	}
	for i := range warmups {
		took, err := renderOnce(i)
		if err != nil {
			return 0, err
		}
		logf("render floor: warm-up %d/%d %s", i+1, warmups, took.Round(time.Microsecond))
	}
	times := make([]time.Duration, 0, runs)
	for i := range runs {
		took, err := renderOnce(warmups + i)
		if err != nil {
			return 0, err
		}
		times = append(times, took)
	}
	slices.Sort(times)
	med := times[len(times)/2]
	if len(times)%2 == 0 {
		med = (times[len(times)/2-1] + times[len(times)/2]) / 2
	}
	logf("render floor: %d warm renders, min %s, median %s, max %s (worker starts %d)", runs,
		times[0].Round(time.Microsecond), med.Round(time.Microsecond), times[len(times)-1].Round(time.Microsecond),
		pool.Stats().Started)
	return med, nil
}
