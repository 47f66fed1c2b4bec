// Command kcl-worker is the KCL engine worker alone: the controller's worker pool starts it
// (internal/kclworker) when it is installed beside the controller binary. It holds nothing but
// the worker, so that each warm worker maps and keeps a fraction of what a copy of the whole
// controller would (docs/benchmarks.md, "Worker memory"). It is not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
)

func main() {
	kclworker.ServeIfWorker()
	fmt.Fprintf(os.Stderr, "kcl-worker is the KCL engine worker of kcl-artifact-controller, started by its worker pool "+
		"as `kcl-worker %s`; it is not meant to be run by hand\n", kclworker.Subcommand)
	os.Exit(2)
}
