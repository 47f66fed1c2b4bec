package kclmod_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/render"
)

// TestResolvedPackagesRender renders, with the KCL engine in a worker process, a program that
// imports a package from each source: a private OCI registry, a Git repository, a local path,
// and (with remote dependencies forbidden) the same packages vendored.
func TestResolvedPackagesRender(t *testing.T) {
	lib, err := kcllib.Find(filepath.Join("..", "..", "bin", kcllib.LibName))
	if os.Getenv(kcllib.EnvLib) != "" {
		lib, err = kcllib.Find("")
	}
	if err != nil {
		t.Skipf("the KCL engine is needed for this test (make libkcl): %v", err)
	}
	pool, err := kclworker.New(kclworker.Options{Size: 1, LibPath: lib, Command: []string{os.Args[0], kclworker.Subcommand}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	reg := kclmodtest.StartRegistry(t, "robot", "pw")
	push(t, reg, "kcl-lang/k8s:1.31.2", k8sPackage(t, "1.31.2"), kclmodtest.PushOptions{})
	gs := kclmodtest.StartGitServer(t)
	gs.CreateRepo("labels", kclmodtest.WritePackage(t, t.TempDir(), "labels", "0.1.0", nil, map[string]string{
		"labels.k": "common = {\"app.kubernetes.io/managed-by\" = \"kcl\"}\n"}))
	gs.Tag("labels", "v0.1.0")

	src := t.TempDir()
	kclmodtest.WritePackage(t, filepath.Join(src, "naming"), "naming", "0.1.0", nil, map[string]string{
		"naming.k": "prefix = \"demo\"\n"})
	app := kclmodtest.WritePackage(t, filepath.Join(src, "app"), "app", "0.1.0", []string{
		`k8s = "1.31.2"`,
		fmt.Sprintf(`labels = { git = "%s", tag = "v0.1.0" }`, gs.URL("labels")),
		`naming = { path = "../naming" }`,
	}, map[string]string{"main.k": `import k8s.api.core.v1 as corev1
import labels
import naming

cm = corev1.ConfigMap {
    metadata.name = naming.prefix + "-config"
    metadata.labels = labels.common
    data.key = "value"
}
`})
	r := newResolver(t, kclmod.Options{DefaultRegistry: reg.Host})
	res, err := r.Resolve(ctx(t), app, src, kclmod.Credentials{DockerConfigJSON: reg.DockerConfigJSON()})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	out, err := render.Render(ctx(t), pool, render.Options{Dir: app, Externals: res.ExternalPkgs()})
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	for _, want := range []string{"kind: ConfigMap", "name: demo-config", "app.kubernetes.io/managed-by: kcl", "key: value"} {
		if !strings.Contains(out.Output, want) {
			t.Fatalf("output lacks %q:\n%s", want, out.Output)
		}
	}

	// the same program with its dependencies vendored, remote ones forbidden
	for _, p := range res.Packages {
		if p.Source == kclmod.SourcePath {
			continue
		}
		if err := os.CopyFS(filepath.Join(app, "vendor", p.Name+"_"+p.Version), os.DirFS(p.Path)); err != nil {
			t.Fatal(err)
		}
	}
	offline := newResolver(t, kclmod.Options{ForbidRemote: true})
	res2, err := offline.Resolve(ctx(t), app, src, kclmod.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer res2.Release()
	out2, err := render.Render(ctx(t), pool, render.Options{Dir: app, Externals: res2.ExternalPkgs()})
	if err != nil {
		t.Fatalf("render vendored: %v", err)
	}
	if out2.Output != out.Output {
		t.Fatalf("vendored render differs:\n%s\nvs\n%s", out2.Output, out.Output)
	}
}
