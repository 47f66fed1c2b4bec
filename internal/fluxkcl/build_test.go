package fluxkcl

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// findController: $KCL_ARTIFACT_CONTROLLER, else beside the plugin's real path, else PATH.
func TestFindController(t *testing.T) {
	real := t.TempDir()
	plugin := filepath.Join(real, "flux-kcl")
	beside := filepath.Join(real, controllerName)
	for _, p := range []string{plugin, beside} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// the plugin as installed: a link in the plugins directory
	link := filepath.Join(t.TempDir(), "flux-kcl")
	if err := os.Symlink(plugin, link); err != nil {
		t.Fatal(err)
	}
	self := func() (string, error) { return link, nil }
	onPath := func(string) (string, error) { return "/on/path/" + controllerName, nil }
	notOnPath := func(string) (string, error) { return "", errors.New("not found") }

	for name, tc := range map[string]struct {
		env      string
		self     func() (string, error)
		lookPath func(string) (string, error)
		want     string
		err      bool
	}{
		"env first":            {env: beside, self: func() (string, error) { return "/nowhere/flux-kcl", nil }, lookPath: onPath, want: beside},
		"env not executable":   {env: filepath.Join(real, "none"), self: self, lookPath: onPath, err: true},
		"beside the real path": {self: self, lookPath: onPath, want: beside},
		"PATH":                 {self: func() (string, error) { return "/nowhere/flux-kcl", nil }, lookPath: onPath, want: "/on/path/" + controllerName},
		"nowhere":              {self: func() (string, error) { return "", errors.New("no") }, lookPath: notOnPath, err: true},
	} {
		got, err := findController(tc.env, tc.self, tc.lookPath)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%s: %q, %v; want %q (error %v)", name, got, err, tc.want, tc.err)
		}
	}
}
