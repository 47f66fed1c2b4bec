// Package fluxkcl implements flux-kcl, the Flux CLI plugin for KCLArtifacts: `flux kcl <verb>`
// when installed as flux-kcl in $FLUXCD_PLUGINS or ~/.fluxcd/plugins (flux v2.9+), or flux-kcl
// on its own. It takes the flux CLI's global flags, prints flux's progress lines on stderr and
// exits as flux does: 0, or 1 with one "✗ <error>" line on stderr.
//
// Only the verbs that need no KCL engine live here; this package must not import the engine.
package fluxkcl

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	runclient "github.com/fluxcd/pkg/runtime/client"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

// defaultNamespace is flux's: flux-system, or FLUX_SYSTEM_NAMESPACE when it is a DNS label.
const defaultNamespace = "flux-system"

// globals are the flux CLI's global flags, as flux v2.9 defines them (cmd/flux/main.go), plus -A,
// which flux defines on each listing command and every verb of this plugin accepts. flux passes
// the flags given before `kcl` on to the plugin, so the plugin must accept every one of them.
type globals struct {
	kube                 *genericclioptions.ConfigFlags
	kubeClient           runclient.Options
	allNamespaces        bool
	timeout              time.Duration
	verbose              bool
	nsFollowsKubeContext bool
}

type app struct {
	globals
	stdout, stderr io.Writer
	log            logger
}

// Main runs the plugin with args (without the program name) and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	// Everything on stderr is for a human: progress lines, errors, the render's messages (which
	// quote the program). Controls in it are shown as escapes, whoever wrote them.
	safeErr := termsafe.NewWriter(stderr)
	defer safeErr.Flush()
	a := &app{stdout: stdout, stderr: safeErr, log: logger{safeErr}}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(safeErr)
	err := root.Execute()
	if err == nil {
		return 0
	}
	code := 1
	var e *exitError
	if errors.As(err, &e) {
		code = e.code
		if e.err == nil {
			return code
		}
	}
	a.log.Failuref("%s", oneLine(err.Error()))
	return code
}

// exitError ends the plugin with code, printing err as the ✗ line when there is one: render's
// codes reach the caller unchanged (a diff's 1 means differences, 2 an error).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "flux-kcl",
		Short:         "Flux CLI plugin for KCLArtifacts (kcl-artifact-controller)",
		SilenceUsage:  true,
		SilenceErrors: true,
		// flux shows the plugin as `flux kcl`; so do usage lines and help
		Annotations:       map[string]string{cobra.CommandDisplayNameAnnotation: "flux kcl"},
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return a.resolveNamespace(cmd) },
	}
	a.addGlobalFlags(root)
	root.AddCommand(a.versionCommand(), a.getCommand(), a.reconcileCommand(), a.suspendCommand(),
		a.resumeCommand(), a.eventsCommand(), a.treeCommand(), a.historyCommand(), a.pinCommand(),
		a.unpinCommand(), a.rollbackCommand(), a.approveCommand(), a.diffCommand(), a.buildCommand(), a.uiCommand(),
		a.verifyCommand(), a.stopLineCommand(), a.resumeLineCommand(),
		a.rejectCommand(), a.unrejectCommand())
	return root
}

func (a *app) addGlobalFlags(root *cobra.Command) {
	pf := root.PersistentFlags()
	pf.DurationVar(&a.timeout, "timeout", 5*time.Minute, "timeout for this operation")
	pf.BoolVar(&a.verbose, "verbose", false, "print generated objects")
	pf.BoolVarP(&a.allNamespaces, "all-namespaces", "A", false, "list the requested object(s) across all namespaces")
	pf.BoolVar(&a.nsFollowsKubeContext, "ns-follows-kube-context", false,
		"use the namespace from the kubeconfig context instead of the default flux-system namespace, can also be set via FLUX_NS_FOLLOWS_KUBE_CONTEXT env var")
	a.kube = genericclioptions.NewConfigFlags(false)
	ns := namespaceDefault(a.log)
	a.kube.Namespace = &ns
	// as flux: no -s (flux's subcommands use it for --silent) and --timeout instead of
	// --request-timeout
	a.kube.APIServer, a.kube.Timeout = nil, nil
	a.kube.AddFlags(pf)
	server := ""
	a.kube.APIServer = &server
	pf.StringVar(a.kube.APIServer, "server", "", "The address and port of the Kubernetes API server")
	a.kubeClient.BindFlags(pf)
}

// restConfig is the kubeconfig's, with flux's --kube-api-qps and --kube-api-burst.
func (a *app) restConfig() (*rest.Config, error) {
	cfg, err := a.kube.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = a.kubeClient.QPS, a.kubeClient.Burst
	return cfg, nil
}

func namespaceDefault(log logger) string {
	ns := os.Getenv("FLUX_SYSTEM_NAMESPACE")
	if ns == "" {
		return defaultNamespace
	}
	if len(validation.IsDNS1123Label(ns)) > 0 {
		log.Warningf(" ignoring invalid FLUX_SYSTEM_NAMESPACE: %q", ns)
		return defaultNamespace
	}
	return ns
}

// resolveNamespace does what flux's root PersistentPreRunE does, which flux skips for plugins.
func (a *app) resolveNamespace(cmd *cobra.Command) error {
	if !cmd.Flags().Changed("namespace") && (a.nsFollowsKubeContext || os.Getenv("FLUX_NS_FOLLOWS_KUBE_CONTEXT") != "") {
		if ns := a.contextNamespace(); ns != "" {
			*a.kube.Namespace = ns
		}
	}
	if ns := *a.kube.Namespace; len(validation.IsDNS1123Label(ns)) > 0 {
		return fmt.Errorf("namespace must be a valid DNS label: %q", ns)
	}
	return nil
}

// contextNamespace is the namespace of the kubeconfig context in use ("" if none).
func (a *app) contextNamespace() string {
	if c := a.kubeContext(); c != nil {
		return c.Namespace
	}
	return ""
}

// kubeContext is the kubeconfig context in use (--context, else the current one); nil if none.
func (a *app) kubeContext() *clientcmdapi.Context {
	raw, err := a.kube.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return nil
	}
	name := raw.CurrentContext
	if a.kube.Context != nil && *a.kube.Context != "" {
		name = *a.kube.Context
	}
	return raw.Contexts[name]
}

// oneLine keeps an error to the one line flux prints.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
