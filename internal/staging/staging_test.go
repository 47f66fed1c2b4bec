package staging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRendersGetFreshDirectoriesPerNamespace(t *testing.T) {
	a, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	d1, err := a.New("team-a")
	if err != nil {
		t.Fatal(err)
	}
	d2, err := a.New("team-a")
	if err != nil {
		t.Fatal(err)
	}
	d3, err := a.New("team-b")
	if err != nil {
		t.Fatal(err)
	}
	if d1.Path == d2.Path || d1.NamespaceRoot != d2.NamespaceRoot || d1.NamespaceRoot == d3.NamespaceRoot {
		t.Fatalf("want distinct render directories in per-namespace roots: %+v %+v %+v", d1, d2, d3)
	}
	if !strings.HasPrefix(d1.Path, d1.NamespaceRoot+string(filepath.Separator)) {
		t.Fatalf("%s is not in %s", d1.Path, d1.NamespaceRoot)
	}
	if err := d1.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d1.Path); !os.IsNotExist(err) {
		t.Fatalf("render directory left behind: %v", err)
	}
}

func TestNamespaceNamesCannotEscape(t *testing.T) {
	a, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, ns := range []string{"..", "../x", "a/b", "", "_startup"} {
		if _, err := a.New(ns); err == nil {
			t.Errorf("namespace %q accepted", ns)
		}
	}
}

func TestRootIsCleanedAndHeldByOneProcess(t *testing.T) {
	root := t.TempDir()
	left := filepath.Join(root, "team-a", "render-old")
	if err := os.MkdirAll(left, 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("leftover of an earlier process kept: %v", err)
	}
	if _, err := New(root); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second holder must be refused, got %v", err)
	}
	a.Close()
	b, err := New(root)
	if err != nil {
		t.Fatalf("released root refused: %v", err)
	}
	b.Close()
}

// A render of a shared source reads it where it is, gets a directory of its own only for its
// dependencies, and cannot be pointed at another namespace's sources.
func TestSharedSourcesStayInTheirNamespace(t *testing.T) {
	a, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	srcA, _ := a.Sources("team-a")
	srcB, _ := a.Sources("team-b")
	for _, dir := range []string{filepath.Join(srcB, "sha256-x"), filepath.Join(srcA, "..", "..", "team-b", "sources", "x"), srcA} {
		if _, err := a.Shared("team-a", dir, nil); err == nil {
			t.Errorf("team-a was given %s", dir)
		}
	}
	released := 0
	d, err := a.Shared("team-a", filepath.Join(srcA, "sha256-x"), func() { released++ })
	if err != nil {
		t.Fatal(err)
	}
	if d.Path != "" || d.Source() != filepath.Join(srcA, "sha256-x") {
		t.Fatalf("shared render: own directory %q, source %q", d.Path, d.Source())
	}
	deps, err := d.Deps()
	if err != nil || !strings.HasPrefix(deps, d.NamespaceRoot+string(filepath.Separator)+"render-") {
		t.Fatalf("deps directory %q: %v", deps, err)
	}
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.Path); !os.IsNotExist(err) || released != 1 {
		t.Fatalf("own directory left (%v) or source not released once (%d)", err, released)
	}
}
