package fluxkcl

import (
	"context"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// suspendFlags are those of suspend and resume.
type suspendFlags struct {
	all            bool
	kustomizations bool
}

func (a *app) suspendCommand() *cobra.Command {
	var f suspendFlags
	cmd := &cobra.Command{
		Use:   "suspend <name> | --all",
		Short: "Suspend the rendering of KCLArtifacts",
		Long: `Suspend KCLArtifacts: nothing is rendered or published until they are resumed; what was
published stays applied. With --kustomizations the generated Kustomizations are suspended too,
which freezes the cluster (kustomize-controller stops applying and correcting drift) until they
are resumed with it; to keep them suspended while renders go on, set spec.kustomization.suspend.
This changes the cluster only: set spec.suspend in Git too, or the next apply from Git reverts it.`,
		Example: `  flux kcl suspend podinfo -n apps
  flux kcl suspend --all -A --kustomizations`,
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.setSuspend(cmd.Context(), args, f, true)
		},
	}
	a.addSuspendFlags(cmd, &f)
	return cmd
}

func (a *app) resumeCommand() *cobra.Command {
	var f suspendFlags
	cmd := &cobra.Command{
		Use:   "resume <name> | --all",
		Short: "Resume suspended KCLArtifacts and wait until they are Ready",
		Long: `Resume KCLArtifacts (and with --kustomizations their generated Kustomizations), request a
reconciliation and wait until each is Ready, as flux resume does.`,
		Example:           `  flux kcl resume podinfo -n apps --kustomizations`,
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.setSuspend(cmd.Context(), args, f, false)
		},
	}
	a.addSuspendFlags(cmd, &f)
	return cmd
}

func (a *app) addSuspendFlags(cmd *cobra.Command, f *suspendFlags) {
	cmd.Flags().BoolVar(&f.all, "all", false, "every KCLArtifact of the namespace (every namespace with -A)")
	cmd.Flags().BoolVar(&f.kustomizations, "kustomizations", false, "also the Kustomizations the KCLArtifacts generate")
}

func (a *app) setSuspend(ctx context.Context, args []string, f suspendFlags, suspend bool) error {
	if f.all == (len(args) > 0) || len(args) > 1 {
		return fmt.Errorf("give one KCLArtifact name or --all")
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	items, _, err := a.listArtifacts(ctx, args)
	if err != nil {
		return err
	}
	c, err := a.newClient()
	if err != nil {
		return err
	}
	for i := range items {
		if err := a.suspendOne(ctx, c, &items[i], f, suspend); err != nil {
			return err
		}
	}
	return nil
}

// suspendOne suspends or resumes the KCLArtifact and, when asked, its Kustomizations, then on
// resume waits for each in that order: a Kustomization applies what the KCLArtifact published.
func (a *app) suspendOne(ctx context.Context, c client.Client, obj *kclv1.KCLArtifact, f suspendFlags, suspend bool) error {
	art := ref{gvk: kclartifactGVK, namespace: obj.Namespace, name: obj.Name}
	targets := []ref{art}
	if f.kustomizations {
		for _, ks := range generatedKustomizations(obj) {
			targets = append(targets, ref{gvk: kustomizationGVK, namespace: obj.Namespace, name: ks})
		}
	}
	verb := map[bool]string{true: "suspend", false: "resum"}[suspend]
	order := targets
	if !suspend {
		// The generated Kustomizations are the controller's: suspended by hand, they are drift
		// that a reconcile of the KCLArtifact puts back. Suspended after it, resumed before it,
		// they change only while it is suspended, which leaves them alone.
		order = append(slices.Clone(targets[1:]), art)
	}
	for _, r := range order {
		a.log.Actionf("%sing %s %s in %s namespace", verb, r.gvk.Kind, r.name, r.namespace)
		if err := mergePatch(ctx, c, r, map[string]any{"spec": map[string]any{"suspend": suspend}}); err != nil {
			return err
		}
		a.log.Successf("%s %sed", r.gvk.Kind, verb)
	}
	if suspend {
		return nil
	}
	return a.waitResumed(ctx, c, obj, targets)
}

// waitResumed waits until the KCLArtifact, then each resumed Kustomization, is Ready.
func (a *app) waitResumed(ctx context.Context, c client.Client, obj *kclv1.KCLArtifact, targets []ref) error {
	for _, r := range targets {
		a.log.Waitingf("waiting for %s reconciliation", r.gvk.Kind)
		u, err := waitReady(ctx, c, r)
		if err != nil {
			return err
		}
		a.log.Successf("%s %s reconciliation completed", r.gvk.Kind, r.name)
		if r.gvk == kclartifactGVK {
			a.log.Successf("rendered revision %s", statusString(u, "artifact", "revision"))
		} else {
			a.log.Successf("applied revision %s", statusString(u, "lastAppliedRevision"))
		}
	}
	return nil
}
