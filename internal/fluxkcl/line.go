package fluxkcl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

var namespaceGVK = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}

func (a *app) stopLineCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "stop-line --reason <why>",
		Short: "Stop the line: no stage of the namespace (or, with -A, of any namespace) publishes a new artifact",
		Long: `Stop the line of a namespace during an incident or a freeze: while it is stopped, no stage
(a KCLArtifact with spec.promotion) in it publishes a new artifact; what it serves stays, rollbacks
still happen, and KCLArtifacts without spec.promotion go on. Each stage's Promoted condition says
who stopped the line, when and why. With -A the line of every namespace is stopped: the
annotation goes on the namespace the controller runs in.

One artifact passes a stopped line when an approver exempts it:
  flux kcl approve <stage> <digest> --exemption "<why>"

It sets annotations on the Namespace, which needs the right to update it (a namespace's own
roles never can):
  kubectl annotate namespace <namespace> --overwrite \
    kcl.contrib.fluxcd.io/stop-the-line="<why>" \
    kcl.contrib.fluxcd.io/stopped-by=<you> \
    kcl.contrib.fluxcd.io/stopped-at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"`,
		Example: `  flux kcl stop-line -n apps --reason "incident 42: checkout errors"
  flux kcl stop-line -A --reason "release freeze until Monday"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
			defer cancel()
			return a.stopLine(ctx, reason)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the line is stopped, shown by every stage it holds (required)")
	return cmd
}

func (a *app) resumeLineCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "resume-line",
		Short: "Resume the line stopped by stop-line (with -A, the line of every namespace)",
		Example: `  flux kcl resume-line -n apps
  flux kcl resume-line -A`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
			defer cancel()
			return a.resumeLine(ctx)
		},
	}
}

func (a *app) stopLine(ctx context.Context, reason string) error {
	if reason == "" {
		return errors.New("--reason is required: every stage the stop holds says it")
	}
	c, ns, scope, err := a.lineTarget(ctx)
	if err != nil {
		return err
	}
	user, err := a.whoAmI(ctx, c)
	if err != nil {
		return err
	}
	a.log.Actionf("stopping the line of %s as %s", scope, user)
	if err := mergePatch(ctx, c, ref{gvk: namespaceGVK, name: ns}, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		kclv1.StopTheLineAnnotation: reason,
		kclv1.StoppedByAnnotation:   user,
		kclv1.StoppedAtAnnotation:   time.Now().UTC().Format(time.RFC3339),
	}}}); err != nil {
		return err
	}
	a.log.Successf("the line of %s is stopped: no stage publishes a new artifact until flux kcl resume-line%s", scope, allFlag(a.allNamespaces))
	return nil
}

func (a *app) resumeLine(ctx context.Context) error {
	c, ns, scope, err := a.lineTarget(ctx)
	if err != nil {
		return err
	}
	a.log.Actionf("resuming the line of %s", scope)
	if err := mergePatch(ctx, c, ref{gvk: namespaceGVK, name: ns}, map[string]any{"metadata": map[string]any{"annotations": map[string]any{
		kclv1.StopTheLineAnnotation: nil, kclv1.StoppedByAnnotation: nil, kclv1.StoppedAtAnnotation: nil,
	}}}); err != nil {
		return err
	}
	a.log.Successf("the line of %s runs", scope)
	return nil
}

// lineTarget is a client and the Namespace whose annotation stops the line asked for.
func (a *app) lineTarget(ctx context.Context) (client.Client, string, string, error) {
	ns, scope, err := a.lineNamespace(ctx)
	if err != nil {
		return nil, "", "", err
	}
	c, err := a.newClient()
	return c, ns, scope, err
}

// lineNamespace is the Namespace whose annotation stops the line asked for: -n's, or with -A the
// controller's own.
func (a *app) lineNamespace(ctx context.Context) (ns, scope string, err error) {
	if !a.allNamespaces {
		ns := *a.kube.Namespace
		return ns, "namespace " + ns, nil
	}
	_, cs, err := a.clientset()
	if err != nil {
		return "", "", err
	}
	d, err := controllerDeployment(ctx, cs)
	if err != nil {
		return "", "", fmt.Errorf("the line of every namespace is stopped on the controller's namespace: %w "+
			"(a controller outside the cluster: -n <its RUNTIME_NAMESPACE> without -A)", err)
	}
	return d.Namespace, "every namespace (on " + d.Namespace + ", the controller's)", nil
}

func allFlag(all bool) string {
	if all {
		return " -A"
	}
	return ""
}
