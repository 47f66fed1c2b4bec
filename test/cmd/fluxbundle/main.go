// Command fluxbundle generates the flux CLI's embedded manifests (cmd/flux/manifests/*.yaml)
// offline, as flux2's manifests/scripts/bundle.sh does with kustomize, except that each
// controller's release assets (<name>.crds.yaml, <name>.deployment.yaml), which flux2's bases
// download from GitHub releases, are built from config/crd and config/manager of the controller's
// Go module, as the controller's own release does.
//
//	go run ./test/cmd/fluxbundle --manifests DIR --out DIR name=MODULEDIR ...
//
// DIR is a writable copy of flux2's manifests/ (its bases are rewritten to point at the local
// assets); every base must be given a module directory.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxassets"
)

func main() {
	manifests := flag.String("manifests", "", "writable copy of flux2's manifests/")
	out := flag.String("out", "", "output directory (cmd/flux/manifests)")
	flag.Parse()
	if err := run(*manifests, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "fluxbundle:", err)
		os.Exit(1)
	}
}

func run(manifests, out string, modules []string) error {
	if manifests == "" || out == "" {
		return fmt.Errorf("--manifests and --out are required")
	}
	mods, err := parseModules(modules)
	if err != nil {
		return err
	}
	bases, err := filepath.Glob(filepath.Join(manifests, "bases", "*"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, base := range bases {
		name := filepath.Base(base)
		mod, ok := mods[name]
		if !ok {
			return fmt.Errorf("no module directory given for the base %s", name)
		}
		if err := fluxassets.Write(base, name, mod, kustomize); err != nil {
			return err
		}
		if err := build(base, filepath.Join(out, name+".yaml")); err != nil {
			return err
		}
	}
	for _, dir := range []string{"rbac", "policies"} {
		if err := build(filepath.Join(manifests, dir), filepath.Join(out, dir+".yaml")); err != nil {
			return err
		}
	}
	return nil
}

func parseModules(args []string) (map[string]string, error) {
	mods := map[string]string{}
	for _, a := range args {
		name, dir, ok := strings.Cut(a, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not name=moduledir", a)
		}
		mods[name] = dir
	}
	return mods, nil
}

func build(dir, out string) error {
	y, err := kustomize(dir)
	if err != nil {
		return err
	}
	fmt.Printf("  %s (%d bytes)\n", filepath.Base(out), len(y))
	return os.WriteFile(out, y, 0o644)
}

func kustomize(dir string) ([]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return m.AsYaml()
}
