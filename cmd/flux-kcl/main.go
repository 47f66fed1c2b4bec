// Command flux-kcl is the Flux CLI plugin for KCLArtifacts: `flux kcl <verb>` once it is in
// $FLUXCD_PLUGINS or ~/.fluxcd/plugins. The verbs are in internal/fluxkcl.
package main

import (
	"os"

	"github.com/kcl-flux/kcl-artifact-controller/internal/fluxkcl"
)

func main() {
	os.Exit(fluxkcl.Main(os.Args[1:], os.Stdout, os.Stderr))
}
