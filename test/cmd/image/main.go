// Command image writes the OCI images a Kubernetes node of the tests imports with
// `ctr -n k8s.io images import <tar>`, without a Docker daemon (test/nodeimage builds them):
//
//	go run ./test/cmd/image [--out bin/images] [--version dev] [--source-controller bin/flux/source-controller]
//	    [--kustomize-controller bin/flux/kustomize-controller]
//	    [--image-reflector-controller bin/flux/image-reflector-controller] [--bin bin] [--without-plugin]
//	    [controller|flux|image-reflector-controller|pause|demo-app|all ...]
//
// It does not build the controller or Flux: a missing binary is an error naming the make target
// that produces it. An image whose inputs did not change is not written again. <out>/index.txt
// lists every image of the directory: "<ref> <tar, relative to the index> <image ID>".
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/kcl-flux/kcl-artifact-controller/test/nodeimage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := pflag.NewFlagSet("image", pflag.ContinueOnError)
	out := fs.String("out", "bin/images", "output directory")
	in := nodeimage.Inputs{RepoRoot: "."}
	fs.StringVar(&in.BinDir, "bin", "bin", "`make build`'s output directory")
	fs.StringVar(&in.Version, "version", "dev", "tag of "+nodeimage.ControllerRepo)
	fs.StringVar(&in.SourceController, "source-controller", "bin/flux/source-controller", "source-controller binary (`make testbin`)")
	noPlugin := fs.Bool("without-plugin", false, "build the controller image without "+nodeimage.PluginFile+", as releases before the plugin shipped it")
	noWorker := fs.Bool("without-worker", false, "build the controller image without "+nodeimage.WorkerFile+
		", as releases before the worker binary shipped it (their controller runs itself as the worker)")
	fs.StringVar(&in.KustomizeController, "kustomize-controller", "bin/flux/kustomize-controller", "kustomize-controller binary (`make testbin`)")
	fs.StringVar(&in.ImageReflectorController, "image-reflector-controller", "bin/flux/image-reflector-controller",
		"image-reflector-controller binary (`make testbin` or `make imagereflector`)")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: go run ./test/cmd/image [flags] [%s]\n%s", targetNames(), fs.FlagUsages())
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	var without []string
	if *noPlugin {
		without = append(without, nodeimage.PluginFile)
	}
	if *noWorker {
		without = append(without, nodeimage.WorkerFile)
	}
	if len(without) > 0 {
		in.ControllerFiles = nodeimage.Without(without...)
	}
	names, err := imageNames(fs.Args())
	if err != nil {
		return err
	}
	in.WorkDir = filepath.Join(*out, ".build")
	specs, err := nodeimage.Specs(names, in)
	if err != nil {
		return err
	}
	return build(specs, *out)
}

// imageNames expands the targets (default all) into image names, each once, in build order.
func imageNames(targets []string) ([]string, error) {
	if len(targets) == 0 {
		targets = []string{"all"}
	}
	var names []string
	seen := map[string]bool{}
	for _, t := range targets {
		group, ok := nodeimage.Targets[t]
		if !ok {
			return nil, fmt.Errorf("unknown target %q (want %s)", t, targetNames())
		}
		for _, n := range group {
			if !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	return names, nil
}

func targetNames() string {
	var ts []string
	for t := range nodeimage.Targets {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	return strings.Join(ts, "|")
}

func build(specs []nodeimage.Spec, out string) error {
	for _, s := range specs {
		r, err := nodeimage.Build(s, nodeimage.Options{OutDir: out})
		if err != nil {
			return err
		}
		state := "built     "
		if r.Cached {
			state = "up to date"
		}
		fmt.Printf("%s %-48s %s %6.1f MB  id %s  manifest %s\n", state, r.Ref,
			filepath.Join(out, r.Tar), float64(r.Size)/1e6, r.ID, r.Digest)
	}
	rs, err := nodeimage.WriteIndex(out)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d images\n", filepath.Join(out, nodeimage.IndexFile), len(rs))
	return nil
}
