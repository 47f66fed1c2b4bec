// Command kcl-artifact-controller renders KCL programs from Flux sources into Flux artifacts.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/kcl-flux/kcl-artifact-controller/internal/depfetch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ocipush"
	"github.com/kcl-flux/kcl-artifact-controller/internal/rendercmd"
	"github.com/kcl-flux/kcl-artifact-controller/internal/version"
)

const usage = `Usage: kcl-artifact-controller <command> [flags]

Commands:
  run       run the controller (see run --help)
  render    render a KCL program as ` + "`kcl run`" + ` does (see render --help)
  version   print the controller and KCL engine versions
`

func main() {
	kclworker.ServeIfWorker()
	depfetch.ServeIfFetcher()
	ocipush.ServeIfPusher()
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	switch os.Args[1] {
	case "run":
		os.Exit(runMain(os.Args[2:]))
	case "render":
		os.Exit(rendercmd.Main(os.Args[2:], os.Stdout, os.Stderr))
	case "version":
		os.Exit(printVersion())
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
}

func printVersion() int {
	fmt.Printf("kcl-artifact-controller %s\n", version.Version)
	lib, err := kcllib.Find("")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	pool, err := kclworker.New(kclworker.Options{Size: 1, LibPath: lib})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	v, err := kcllib.GetVersion(func(m string, a []byte) ([]byte, error) { return pool.Call(context.Background(), m, a) })
	if err != nil {
		fmt.Fprintln(os.Stderr, "KCL engine:", err)
		return 1
	}
	fmt.Printf("KCL engine %s (%s, git %s)\n", v.Version, lib, v.GitSha)
	return 0
}
