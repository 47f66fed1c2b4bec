// Command fluxbundle generates the flux CLI's embedded manifests (cmd/flux/manifests/*.yaml)
// offline, as flux2's manifests/scripts/bundle.sh does with kustomize, except that each
// controller's release assets (<name>.crds.yaml, <name>.deployment.yaml), which flux2's bases
// download from GitHub releases, are built from config/crd and config/manager of the controller's
// Go module, as the controller's own release does.
//
//	go run ./hack/fluxbundle --manifests DIR --out DIR name=MODULEDIR ...
//
// DIR is a writable copy of flux2's manifests/ (its bases are rewritten to point at the local
// assets); every base must be given a module directory.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
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
		if err := localAssets(base, name, mod); err != nil {
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

// releaseURL matches the release assets a base downloads.
var releaseURL = regexp.MustCompile(`https://github\.com/fluxcd/[a-z-]+/releases/download/v[^/]+/([a-z-]+\.(crds|deployment)\.yaml)`)

// localAssets writes the release assets of a base from the module and points the base at them.
// That a base downloads nothing is an error: flux2's layout is not what this tool knows.
func localAssets(base, name, mod string) error {
	for asset, src := range map[string]string{"crds": "config/crd", "deployment": "config/manager"} {
		y, err := kustomize(filepath.Join(mod, src))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(base, name+"."+asset+".yaml"), y, 0o644); err != nil {
			return err
		}
	}
	kfile := filepath.Join(base, "kustomization.yaml")
	data, err := os.ReadFile(kfile)
	if err != nil {
		return err
	}
	found := releaseURL.FindAllStringSubmatch(string(data), -1)
	if len(found) != 2 {
		return fmt.Errorf("%s: %d release downloads, want the crds and the deployment", kfile, len(found))
	}
	return os.WriteFile(kfile, []byte(releaseURL.ReplaceAllString(string(data), "$1")), 0o644)
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
