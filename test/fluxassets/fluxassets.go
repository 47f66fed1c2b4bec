// Package fluxassets stands in for the GitHub releases of Flux's controllers, which cannot be
// downloaded here: it builds a controller's release assets from its Go module, as its release does,
// for flux2's manifests (test/nodeinstall's install, test/cmd/fluxbundle's flux CLI).
package fluxassets

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// releaseURL matches the release assets flux2's bases download: <name>.crds.yaml and
// <name>.deployment.yaml.
var releaseURL = regexp.MustCompile(`https://github\.com/fluxcd/[a-z-]+/releases/download/v[^/]+/([a-z-]+\.(crds|deployment)\.yaml)`)

// Write builds the release assets of controller name (kustomize of config/crd and config/manager
// of its module directory mod) into flux2's base directory and points the base's
// kustomization.yaml at them instead of the download. A base that does not download exactly those
// two is an error: flux2's layout is not what this package knows.
func Write(base, name, mod string, kustomize func(dir string) ([]byte, error)) error {
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
	if found := releaseURL.FindAllString(string(data), -1); len(found) != 2 {
		return fmt.Errorf("%s: %d release downloads of %s, want the crds and the deployment", kfile, len(found), name)
	}
	return os.WriteFile(kfile, []byte(releaseURL.ReplaceAllString(string(data), "$1")), 0o644)
}
