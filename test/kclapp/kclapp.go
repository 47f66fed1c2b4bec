// Package kclapp is the KCL application that the tests of `render --kclartifact` and of
// `flux kcl build/diff kclartifact` render, so that both hold the CLI to the same output: its
// source (app/: the program under deploy/, its KCLArtifact in clusters/app.yaml), what it
// publishes (published/, golden), and its checkout as CI's actions/checkout leaves one.
package kclapp

import (
	"embed"
	"os"
	"os/exec"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

//go:embed app published
var files embed.FS

// The source, as paths of a checkout: the KCLArtifact apps/app (replicas 3, no Kustomization)
// renders ProgramPath, which prints "rendering".
const (
	ProgramPath     = "deploy/main.k"
	KCLArtifactPath = "clusters/app.yaml"
)

var (
	Program     = read("app/" + ProgramPath)
	KCLArtifact = read("app/" + KCLArtifactPath)
	// Pre is the pre phase as published: one ConfigMap.
	Pre = read("published/pre.yaml")
)

// Main is the main phase as published with these arguments: a ConfigMap and a Secret.
func Main(greeting, replicas, password string) string {
	values := map[string]string{"greeting": greeting, "replicas": replicas, "password": password}
	return os.Expand(read("published/main.yaml"), func(k string) string { return values[k] })
}

// Published is all the artifact holds, in order: the pre phase, then main.
func Published(greeting, replicas, password string) string {
	return Pre + "---\n" + Main(greeting, replicas, password)
}

func read(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	return string(b)
}

// GitToken is what actions/checkout persists in .git/config: the job's token, which no render may read.
const GitToken = "AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hzX0ZBS0VUT0tFTg=="

// Source is the application as files of a checkout: the program and its KCLArtifact.
func Source() map[string]string {
	return map[string]string{ProgramPath: Program, KCLArtifactPath: KCLArtifact}
}

// Checkout writes files (relative paths) into dir and commits them on main, with GitToken in
// .git/config.
func Checkout(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	kclmodtest.WriteFiles(t, dir, files)
	Git(t, dir, "init", "-q", "-b", "main")
	Git(t, dir, "config", "http.https://github.com/.extraheader", GitToken)
	Git(t, dir, "add", ".")
	Git(t, dir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "checkout")
}

// Git runs git in dir, away from the user's and the system's configuration.
func Git(t testing.TB, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}
