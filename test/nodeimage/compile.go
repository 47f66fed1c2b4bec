package nodeimage

import (
	"bytes"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The pause and demo-app binaries are this repository's own sources, compiled by the image build
// itself (cheap: gcc takes a fraction of a second and Go's build cache keeps the demo app), unlike
// the controller's and Flux's binaries, which come from `make build` and `make testbin`.

//go:embed pause/pause.c
var pauseSource []byte

// BuildPause compiles pause/pause.c as a static, stripped program: dir/pause.
func BuildPause(dir string) (string, error) {
	out := filepath.Join(dir, Pause)
	cmd := exec.Command("gcc", "-static", "-Os", "-s", "-Wall", "-Werror", "-x", "c", "-o", out, "-")
	cmd.Stdin = bytes.NewReader(pauseSource)
	return out, compile(cmd, dir)
}

// BuildDemoApp builds demoapp/ (test/nodeimage/demoapp) of the module at root as a static Go
// program: dir/demo-app. -trimpath and no VCS stamp keep the binary, so the image digest, the same
// from one checkout to the next.
func BuildDemoApp(root, dir string) (string, error) {
	out, err := filepath.Abs(filepath.Join(dir, DemoApp))
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, "./test/nodeimage/demoapp")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	return out, compile(cmd, dir)
}

func compile(cmd *exec.Cmd, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return nil
}
