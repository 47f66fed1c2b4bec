package main

import (
	"context"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/sandbox"
	"github.com/kcl-flux/kcl-artifact-controller/internal/staging"
)

// A kernel without Landlock cannot be had here: sandbox.ABI stands for one.
func TestRefusesToStartWithoutLandlock(t *testing.T) {
	saved := sandbox.ABI
	sandbox.ABI = func() int { return 0 }
	defer func() { sandbox.ABI = saved }()
	area, err := staging.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = startEngine(context.Background(), runFlags{sandbox: sandboxOn}, area)
	if err == nil || !strings.Contains(err.Error(), "Landlock") || !strings.Contains(err.Error(), "--kcl-sandbox=off") {
		t.Fatalf("want a refusal naming Landlock and --kcl-sandbox=off, got %v", err)
	}
}

func TestRefusesAnUnknownSandboxMode(t *testing.T) {
	area, err := staging.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := startEngine(context.Background(), runFlags{sandbox: "maybe"}, area); err == nil {
		t.Fatal("--kcl-sandbox=maybe was accepted")
	}
}
