// Package conformance runs KCL's own grammar suite (../shared/kcl-conformance) through the built
// binary, judging each case the way KCL's runner does: `kcl run main.k <kcl_options>` in the case
// directory, stdout compared with stdout.golden as a list of YAML documents, and for error cases a
// non-zero exit whose stderr contains stderr.golden (ANSI codes and blank lines removed, ${CWD}
// replaced by the case directory).
package conformance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const knownFailuresFile = "known-failures.txt"

type kind int

const (
	stdoutCase kind = iota
	stderrCase
)

type testCase struct {
	name    string // path below cases/
	dir     string // the case's copy in a temporary directory
	kind    kind
	options []string
	golden  string
}

type outcome struct {
	pass      bool
	exactText bool // error cases only: stderr contains the golden text
	reason    string
}

func casesDir(t *testing.T) string {
	dir := os.Getenv("KCL_CONFORMANCE_DIR")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "kcl-conformance", "cases")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("KCL conformance data not found at %s (set KCL_CONFORMANCE_DIR): %v", dir, err)
	}
	return dir
}

func binary(t *testing.T) string {
	b := os.Getenv("KCL_BINARY")
	if b == "" {
		b = filepath.Join("..", "..", "bin", "kcl-artifact-controller")
	}
	abs, err := filepath.Abs(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("binary %s not built (run `make build`): %v", abs, err)
	}
	return abs
}

func TestConformance(t *testing.T) {
	src, bin := casesDir(t), binary(t)
	// The engine may write caches next to the program: run a copy, never the shared data itself.
	root := t.TempDir()
	if err := os.CopyFS(root, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "version").CombinedOutput(); err != nil {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	cases := discover(t, root)
	if len(cases) < 100 {
		t.Fatalf("found only %d conformance cases under %s", len(cases), src)
	}
	known := readKnownFailures(t)

	results := runAll(bin, cases, nil)
	report(t, cases, results, known)

	// The same cases confined as the controller renders (each case directory is the source):
	// the sandbox must change no result, except where a case reaches outside its directory.
	confined := runAll(bin, cases, []string{"--sandbox"})
	compareConfined(t, cases, results, confined, readList(t, sandboxDifferencesFile))
}

// sandboxDifferencesFile lists the cases whose result confined differs, each with the reason.
const sandboxDifferencesFile = "sandbox-differences.txt"

func compareConfined(t *testing.T, cases []testCase, open, confined []outcome, known map[string]string) {
	same := 0
	for i, c := range cases {
		_, listed := known[c.name]
		switch {
		case open[i].pass == confined[i].pass:
			same++
			if listed {
				t.Errorf("%s is listed in %s but behaves the same confined: remove it", c.name, sandboxDifferencesFile)
			}
		case !listed:
			t.Errorf("confined, %s %s: %s", c.name, map[bool]string{true: "passes", false: "fails"}[confined[i].pass], confined[i].reason)
		}
	}
	t.Logf("confined: %d/%d cases behave as unconfined", same, len(cases))
}

func discover(t *testing.T, root string) []testCase {
	var cases []testCase
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if _, err := os.Stat(filepath.Join(p, "main.k")); err != nil {
			return nil
		}
		c := testCase{dir: p}
		c.name, _ = filepath.Rel(root, p)
		if b, err := os.ReadFile(filepath.Join(p, "stdout.golden")); err == nil {
			c.kind, c.golden = stdoutCase, string(b)
		} else if b, err := os.ReadFile(filepath.Join(p, "stderr.golden")); err == nil {
			c.kind, c.golden = stderrCase, string(b)
		} else {
			return nil
		}
		c.options = kclOptions(t, p)
		cases = append(cases, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(cases, func(i, j int) bool { return cases[i].name < cases[j].name })
	return cases
}

// kclOptions reads settings.yaml; like KCL's runner, options are split on white space, no quoting.
func kclOptions(t *testing.T, dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "settings.yaml"))
	if err != nil {
		return nil
	}
	var s struct {
		Options string `yaml:"kcl_options"`
	}
	if err := yaml.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s/settings.yaml: %v", dir, err)
	}
	return strings.Fields(s.Options)
}

func runAll(bin string, cases []testCase, extra []string) []outcome {
	results := make([]outcome, len(cases))
	next := make(chan int)
	var wg sync.WaitGroup
	for range 2 * runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = runCase(bin, cases[i], extra)
			}
		}()
	}
	for i := range cases {
		next <- i
	}
	close(next)
	wg.Wait()
	return results
}

func runCase(bin string, c testCase, extra []string) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(append([]string{"render", "main.k", "--timeout", "60s"}, extra...), c.options...)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = c.dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return outcome{reason: "could not run: " + err.Error()}
	}
	failed := err != nil
	if c.kind == stderrCase {
		// Exit status 1 is a render failure; 2 is a usage or setup error, which proves nothing.
		if !failed || exitErr.ExitCode() != 1 {
			return outcome{reason: fmt.Sprintf("exit status %d, expected 1 (a KCL error): %s",
				cmd.ProcessState.ExitCode(), firstLines(cleanText(stderr.String()), 3))}
		}
		want := cleanText(strings.ReplaceAll(c.golden, "${CWD}", c.dir))
		exact := strings.Contains(cleanText(stderr.String()), want)
		return outcome{pass: true, exactText: exact}
	}
	if failed {
		return outcome{reason: "unexpected error: " + firstLines(cleanText(stderr.String()), 3)}
	}
	if ok, why := sameDocuments(stdout.String(), c.golden); !ok {
		return outcome{reason: why}
	}
	return outcome{pass: true}
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

func cleanText(s string) string {
	var lines []string
	for _, l := range strings.Split(ansi.ReplaceAllString(s, ""), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, " | ")
}

func sameDocuments(got, want string) (bool, string) {
	g, gerr := documents(got)
	w, werr := documents(want)
	if gerr != nil || werr != nil {
		if strings.TrimSpace(got) == strings.TrimSpace(want) {
			return true, ""
		}
		return false, fmt.Sprintf("output differs (not YAML: %v %v)", gerr, werr)
	}
	if equal(g, w) {
		return true, ""
	}
	return false, "YAML documents differ"
}

// equal compares decoded YAML as KCL's Python runner does: 729 equals 729.0.
func equal(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	switch a := a.(type) {
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !equal(a[i], b[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, v := range a {
			if w, ok := b[k]; !ok || !equal(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func documents(s string) ([]any, error) {
	dec := yaml.NewDecoder(strings.NewReader(s))
	var docs []any
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, v)
	}
}

// readKnownFailures reads the known failures list.
func readKnownFailures(t *testing.T) map[string]string { return readList(t, knownFailuresFile) }

// readList reads "case | reason" lines; every entry needs a reason.
func readList(t *testing.T, file string) map[string]string {
	f, err := os.Open(file)
	if err != nil {
		t.Fatalf("reading %s: %v", file, err)
	}
	defer f.Close()
	known := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, reason, ok := strings.Cut(line, "|")
		if !ok || strings.TrimSpace(reason) == "" {
			t.Fatalf("%s: %q has no reason", file, line)
		}
		known[strings.TrimSpace(name)] = strings.TrimSpace(reason)
	}
	return known
}

func report(t *testing.T, cases []testCase, results []outcome, known map[string]string) {
	var total, passed [2]int
	exact := 0
	var unexpected, stale []string
	for i, c := range cases {
		r := results[i]
		total[c.kind]++
		if r.pass {
			passed[c.kind]++
			if r.exactText {
				exact++
			}
			if _, ok := known[c.name]; ok {
				stale = append(stale, c.name)
			}
			continue
		}
		if _, ok := known[c.name]; !ok {
			unexpected = append(unexpected, fmt.Sprintf("%s | %s", c.name, r.reason))
		}
	}
	pct := func(a, b int) float64 { return 100 * float64(a) / float64(b) }
	t.Logf("stdout cases: %d/%d pass (%.1f%%)", passed[stdoutCase], total[stdoutCase], pct(passed[stdoutCase], total[stdoutCase]))
	t.Logf("error cases: %d/%d exit non-zero (%.1f%%); %d of them print the golden error text",
		passed[stderrCase], total[stderrCase], pct(passed[stderrCase], total[stderrCase]), exact)
	fmt.Printf("conformance: %d passed, %d failed\n", passed[0]+passed[1], total[0]+total[1]-passed[0]-passed[1])
	for _, u := range unexpected {
		t.Errorf("unexpected failure: %s", u)
	}
	for _, s := range stale {
		t.Errorf("%s is listed in %s but passes now: remove it", s, knownFailuresFile)
	}
}
