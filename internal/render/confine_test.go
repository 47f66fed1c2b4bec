package render

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestConfinerKeepsPathsInsideTheRoot(t *testing.T) {
	root := t.TempDir()
	pkg := filepath.Join(root, "source", "app")
	dep := filepath.Join(root, "deps", "0", "k8s")
	for _, d := range []string{pkg, dep} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(pkg, "link")); err != nil {
		t.Fatal(err)
	}
	c := &confiner{root: root, modRoot: pkg, externals: map[string]string{"k8s": dep}}
	ok := map[string]string{
		"main.k":                 filepath.Join(pkg, "main.k"),
		"../app/x.k":             filepath.Join(pkg, "x.k"),
		"${KCL_MOD}/base.k":      filepath.Join(pkg, "base.k"),
		"${k8s:KCL_MOD}/api/v.k": filepath.Join(dep, "api", "v.k"),
	}
	for in, want := range ok {
		got, err := c.path("entries", pkg, in)
		if err != nil || got != want {
			t.Errorf("%s: got %q %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"/etc/hostname", "../../../x.k", "${KCL_MOD}/../../../x.k", "${k8s:KCL_MOD}/../../other",
		"link/secret.k", outside} {
		_, err := c.path("entries", pkg, in)
		var oe *OutsideError
		if !errors.As(err, &oe) || oe.Field != "entries" || oe.Path != in {
			t.Errorf("%s: want an OutsideError naming entries and the path, got %v", in, err)
		}
	}
	for _, in := range []string{"${nope:KCL_MOD}/x.k", "${HOME}/x.k"} {
		if _, err := c.path("entries", pkg, in); err == nil {
			t.Errorf("%s accepted", in)
		}
	}
}

func TestWithoutRootPathsPassAsKclTakesThem(t *testing.T) {
	c := &confiner{}
	if got, err := c.path("entries", "/work", "/etc/hostname"); err != nil || got != "/etc/hostname" {
		t.Fatalf("%q %v", got, err)
	}
	if got, err := c.path("entries", "/work", "${KCL_MOD}/a.k"); err != nil || got != "${KCL_MOD}/a.k" {
		t.Fatalf("unconfined ${KCL_MOD} is left to the engine: %q %v", got, err)
	}
}

func TestProfileEntriesAreConfined(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, ModFile), []byte("[profile]\nentries = [\"../../etc/passwd\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := expandInputs(&confiner{root: root, modRoot: root}, "entries", root, []string{root})
	var oe *OutsideError
	if !errors.As(err, &oe) || oe.Field != "kcl.mod [profile] entries" {
		t.Fatalf("want the profile entry refused, got %v", err)
	}
}
