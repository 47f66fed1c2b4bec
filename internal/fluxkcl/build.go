package fluxkcl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

// build and diff kclartifact need the KCL engine, which this plugin must not link: they run
// `kcl-artifact-controller render`, the same code and sandbox the controller renders with.
const (
	controllerEnv  = "KCL_ARTIFACT_CONTROLLER"
	controllerName = "kcl-artifact-controller"
)

// renderFlags are the flags of build and diff kclartifact that become render's.
type renderFlags struct {
	path, file, phase string
	// diff only
	from, output string
}

// buildCommand is `flux kcl build kclartifact`, the local counterpart of `flux build kustomization`.
func (a *app) buildCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "build",
		Short: "Render a KCLArtifact locally, as the controller would (needs the KCL engine)",
		// flux build <kind>: only kclartifact is one here
		Args: cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			kind := ""
			if len(args) > 0 {
				kind = args[0]
			}
			return unknownKind("build", kind)
		},
	}
	cmd.AddCommand(a.buildKCLArtifactCommand())
	return cmd
}

func (a *app) buildKCLArtifactCommand() *cobra.Command {
	var rf renderFlags
	cmd := &cobra.Command{
		Use:   "kclartifact <name> --path <dir>",
		Short: "Print what a KCLArtifact renders from a local checkout of its source",
		Long: `Render the KCLArtifact's program from the checkout of its source at --path as the controller
renders it (spec.path, entries, settings, overrides, options, arguments, and argumentsFrom read
from the cluster), and print the output as its artifact holds it: all of it, or one deploy phase
with --phase. The KCLArtifact is read from the cluster, or from --kclartifact-file (then the cluster
is needed only for its argumentsFrom). The program runs confined as in the controller: it reads
the checkout without .git, and no environment, network or other files.

Runs kcl-artifact-controller render (it carries the KCL engine), found as $KCL_ARTIFACT_CONTROLLER,
beside flux-kcl, or on PATH. Exit status: 0, 1 when the render fails, 2 on a usage error.`,
		Example: `  # Render podinfo from a local clone of its GitRepository
  flux kcl build kclartifact podinfo -n apps --path ~/src/fleet

  # Render the KCLArtifact of a manifest, its pre-deploy phase only
  flux kcl build kclartifact podinfo -n apps --path . --kclartifact-file clusters/prod/podinfo.yaml --phase pre`,
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			renderArgs, err := a.renderArgs(cmd, args, rf, false)
			if err == nil {
				err = a.checkArtifact(cmd.Context(), args[0], rf)
			}
			if err != nil {
				return err
			}
			return a.runRender("flux kcl build", renderArgs, false)
		},
	}
	rf.addFlags(cmd.Flags())
	return cmd
}

// diffKCLArtifactCommand is `flux kcl diff kclartifact`, the local counterpart of
// `flux diff kustomization`.
func (a *app) diffKCLArtifactCommand() *cobra.Command {
	var rf renderFlags
	cmd := &cobra.Command{
		Use:   "kclartifact <name> --path <dir>",
		Short: "Compare a local render of a KCLArtifact with the cluster (needs the KCL engine)",
		Long: `Render the KCLArtifact from the checkout of its source at --path, as build kclartifact does, build
each deploy phase with its generated Kustomization as kustomize-controller would, and compare the
objects with the cluster by server-side dry-run apply, as flux diff kustomization does; objects the
Kustomizations would prune are shown as removed. Secret values, and values the render took from
Secrets, are masked. With --from, compare with the render of another checkout (a directory, or a
Git revision of the repository of the current directory) without a cluster; the KCLArtifact then
comes from --kclartifact-file, read in each checkout.

Runs kcl-artifact-controller render --diff (or --diff-from). Exit status: 0 no differences,
1 differences, 2 error.`,
		Example: `  # What a change in the local clone would do to the cluster
  flux kcl diff kclartifact podinfo -n apps --path ~/src/fleet

  # What a branch changes against main, as a pull-request comment, with no cluster
  flux kcl diff kclartifact podinfo -n apps --path . --kclartifact-file clusters/prod/podinfo.yaml \
    --from origin/main -o markdown`,
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			renderArgs, err := a.renderArgs(cmd, args, rf, true)
			if err == nil && rf.from == "" {
				err = a.checkArtifact(cmd.Context(), args[0], rf)
			}
			if err == nil {
				err = a.runRender("flux kcl diff kclartifact", renderArgs, true)
			}
			var code *exitError
			if err != nil && !errors.As(err, &code) {
				// as flux diff: an error is 2, since 1 means differences
				return &exitError{code: 2, err: err}
			}
			return err
		},
	}
	rf.addFlags(cmd.Flags())
	cmd.Flags().StringVar(&rf.from, "from", "", "compare with the render of another checkout instead of the cluster: a directory, or a Git revision of the repository of the current directory (needs --kclartifact-file)")
	cmd.Flags().StringVarP(&rf.output, "output", "o", "", "format of the differences: unified (default) or markdown (a pull-request comment)")
	return cmd
}

func (rf *renderFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&rf.path, "path", "", "the directory the KCLArtifact's source is checked out in (spec.path is taken in it)")
	fs.StringVar(&rf.file, "kclartifact-file", "", "read the KCLArtifact from this manifest file instead of the cluster")
	fs.StringVar(&rf.phase, "phase", "", "only this deploy phase: pre, main or post")
}

// renderArgs checks the command line and returns render's.
func (a *app) renderArgs(cmd *cobra.Command, args []string, rf renderFlags, diff bool) ([]string, error) {
	if len(args) != 1 {
		return nil, errors.New("KCLArtifact name is required")
	}
	if msgs := validation.IsDNS1123Subdomain(args[0]); len(msgs) > 0 {
		return nil, fmt.Errorf("invalid KCLArtifact name %q: %s", args[0], strings.Join(msgs, "; "))
	}
	if fi, err := os.Stat(rf.path); rf.path == "" || err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("invalid resource path %q: --path is the directory the KCLArtifact's source is checked out in", rf.path)
	}
	if err := unpassedFlags(cmd); err != nil {
		return nil, err
	}
	out := []string{"--kclartifact", *a.kube.Namespace + "/" + args[0]}
	add := func(name, value string) {
		if value != "" {
			out = append(out, "--"+name, value)
		}
	}
	add("kclartifact-file", rf.file)
	add("phase", rf.phase)
	add("kubeconfig", *a.kube.KubeConfig)
	add("context", *a.kube.Context)
	if cmd.Flags().Changed("timeout") {
		add("timeout", a.timeout.String())
	}
	if diff {
		if rf.from != "" {
			add("diff-from", rf.from)
		} else {
			out = append(out, "--diff")
		}
		add("output", rf.output)
	}
	return append(out, "--", rf.path), nil
}

// passedFlags are the global flags build and diff honour: the kubeconfig ones render takes, the
// namespace (in --kclartifact ns/name), --timeout (the render's deadline), and those that change
// nothing here.
var passedFlags = map[string]bool{"kubeconfig": true, "context": true, "namespace": true, "timeout": true,
	"ns-follows-kube-context": true, "verbose": true, "all-namespaces": true, "kube-api-qps": true,
	"kube-api-burst": true, "cache-dir": true}

// unpassedFlags refuses the global flags render cannot take, rather than ignore them: with
// --server or --token the render would read another cluster than the one asked for.
func unpassedFlags(cmd *cobra.Command) error {
	var refused []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if cmd.Root().PersistentFlags().Lookup(f.Name) != nil && !passedFlags[f.Name] {
			refused = append(refused, "--"+f.Name)
		}
	})
	if len(refused) > 0 {
		return fmt.Errorf("%s: kcl-artifact-controller render reads the cluster from the kubeconfig only (--kubeconfig, --context)",
			strings.Join(refused, ", "))
	}
	return nil
}

// checkArtifact fails as the other verbs do when the KCLArtifact is not in the cluster, before
// the render starts; from a manifest file, the render reads what it needs.
func (a *app) checkArtifact(ctx context.Context, name string, rf renderFlags) error {
	if rf.file != "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	_, _, err := a.clientAndArtifact(ctx, name)
	return err
}

// runRender runs `kcl-artifact-controller render args...` with this process's standard streams;
// if it fails, the plugin exits with its code. Its stderr goes through the plugin's, escaped as
// everything there is (what the program prints, the engine's errors); its stdout is escaped too
// when it is a diff, and passed exactly when it is the output (data, as -o yaml is).
func (a *app) runRender(verb string, args []string, diff bool) error {
	exe, err := findController(os.Getenv(controllerEnv), os.Executable, exec.LookPath)
	if err != nil {
		return fmt.Errorf("%s needs %s (it carries the KCL engine): %w", verb, controllerName, err)
	}
	cmd := exec.Command(exe, append([]string{"render"}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, a.stdout, a.stderr
	if diff {
		out := termsafe.NewWriter(a.stdout)
		defer out.Flush()
		cmd.Stdout = out
	}
	// Ctrl-C reaches the render too (same process group): it removes its copies of the checkout
	// and exits, and its code is passed on. A caught signal is not inherited, an ignored one is.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	err = cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		// the render said why on stderr; its code goes on unchanged
		return &exitError{code: exitCode(exitErr)}
	case err != nil:
		return fmt.Errorf("running %s render: %w", controllerName, err)
	}
	return nil
}

// exitCode is the render's code, or 128+n when a signal n ended it, as shells say.
func exitCode(e *exec.ExitError) int {
	if ws, ok := e.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return e.ExitCode()
}

// errNoController is what the user reads when render is nowhere: what to do about it.
var errNoController = errors.New("put it on PATH or set " + controllerEnv)

// findController is $KCL_ARTIFACT_CONTROLLER, else kcl-artifact-controller beside this
// executable (symlinks resolved: an installed plugin is often a link), else on PATH.
func findController(env string, self func() (string, error), lookPath func(string) (string, error)) (string, error) {
	if env != "" {
		if !executable(env) {
			return "", fmt.Errorf("%s=%s is not an executable file", controllerEnv, env)
		}
		return env, nil
	}
	if exe, err := self(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			if beside := filepath.Join(filepath.Dir(exe), controllerName); executable(beside) {
				return beside, nil
			}
		}
	}
	if p, err := lookPath(controllerName); err == nil {
		return p, nil
	}
	return "", errNoController
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
