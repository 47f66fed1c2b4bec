package fluxkcl

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
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
through spec.kustomization.suspend (the controller suspends them before the KCLArtifact is),
which freezes the cluster (kustomize-controller stops applying and correcting drift) until they
are resumed with it; to keep them suspended while renders go on, set only
spec.kustomization.suspend.
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
// The generated Kustomizations are the controller's (a suspend written on one is put back, and
// config/admission refuses it): they are suspended through the template,
// spec.kustomization.suspend, which the controller carries into them before the KCLArtifact
// itself is suspended, and resumed in the same write as the KCLArtifact. Of a stage whose
// promotions need approval, that takes the verb approve, as any change of spec.kustomization.
func (a *app) suspendOne(ctx context.Context, c client.Client, obj *kclv1.KCLArtifact, f suspendFlags, suspend bool) error {
	art := ref{gvk: kclartifactGVK, namespace: obj.Namespace, name: obj.Name}
	var kss []ref
	if f.kustomizations {
		for _, ks := range generatedKustomizations(obj) {
			kss = append(kss, ref{gvk: kustomizationGVK, namespace: obj.Namespace, name: ks})
		}
	}
	verb := map[bool]string{true: "suspend", false: "resum"}[suspend]
	spec := map[string]any{"suspend": suspend}
	if len(kss) > 0 {
		spec["kustomization"] = map[string]any{"suspend": suspend}
	}
	if suspend && len(kss) > 0 {
		if err := a.suspendKustomizations(ctx, c, art, kss); err != nil {
			return err
		}
		delete(spec, "kustomization")
	}
	a.log.Actionf("%sing %s %s in %s namespace", verb, art.gvk.Kind, art.name, art.namespace)
	if err := mergePatch(ctx, c, art, map[string]any{"spec": spec}); err != nil {
		return err
	}
	a.log.Successf("%s %sed", art.gvk.Kind, verb)
	if !suspend {
		for _, r := range kss {
			a.log.Successf("%s %s resumed (spec.kustomization.suspend)", r.gvk.Kind, r.name)
		}
		return a.waitResumed(ctx, c, obj, append([]ref{art}, kss...))
	}
	return nil
}

// suspendKustomizations sets spec.kustomization.suspend and waits until the controller has
// suspended each generated Kustomization.
func (a *app) suspendKustomizations(ctx context.Context, c client.Client, art ref, kss []ref) error {
	for _, r := range kss {
		a.log.Actionf("suspending %s %s in %s namespace", r.gvk.Kind, r.name, r.namespace)
	}
	if err := mergePatch(ctx, c, art, map[string]any{"spec": map[string]any{"kustomization": map[string]any{"suspend": true}}}); err != nil {
		return err
	}
	for _, r := range kss {
		if err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
			u, err := r.get(ctx, c)
			if err != nil {
				return false, client.IgnoreNotFound(err)
			}
			done, _, _ := unstructured.NestedBool(u.Object, "spec", "suspend")
			return done, nil
		}); err != nil {
			return fmt.Errorf("waiting for the controller to suspend %s %s/%s (spec.kustomization.suspend): %w", r.gvk.Kind, r.namespace, r.name, err)
		}
		a.log.Successf("%s suspended", r.gvk.Kind)
	}
	return nil
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
