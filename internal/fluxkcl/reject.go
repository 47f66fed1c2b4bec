package fluxkcl

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/spf13/cobra"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

func (a *app) rejectCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "reject <name> <digest> --reason <why>",
		Short: "Mark a release bad: no stage of the pipeline promotes it again, and one that runs it rolls back",
		Long: `Reject the release an artifact of a KCLArtifact was rendered from (its digest, or a unique
prefix of one, from its history or its waiting artifacts): its source revision and the values it
read from objects. No stage of the pipeline (the stages this KCLArtifact follows and those that
follow it) promotes that release again, a KCLArtifact of the pipeline that runs it rolls back where
spec.remediation is set, and the same inputs are not published again, across restarts, resets and
new renders, until flux kcl unreject lifts it. It needs the verb approve (config/admission).

The same with kubectl (the reject annotation is a comma-separated list of digests):
  kubectl annotate kclartifact <name> -n <namespace> --overwrite \
    kcl.contrib.fluxcd.io/reject=<digest> \
    kcl.contrib.fluxcd.io/rejected-by=<you> \
    kcl.contrib.fluxcd.io/reject-reason="<why>"`,
		Example: `  flux kcl reject staging sha256:1234abcd -n apps --reason "checkout errors after the rollout"`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
			defer cancel()
			return a.reject(ctx, args[0], args[1], reason, true)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the release is bad, shown wherever it is held back (required)")
	return cmd
}

func (a *app) unrejectCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "unreject <name> <digest>",
		Short:   "Lift a rejection made with flux kcl reject",
		Example: `  flux kcl unreject staging sha256:1234abcd -n apps`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
			defer cancel()
			return a.reject(ctx, args[0], args[1], "", false)
		},
	}
}

// reject adds digest (or a unique prefix of one of obj's artifacts) to the reject annotation, or
// with add false removes it.
func (a *app) reject(ctx context.Context, name, prefix, reason string, add bool) error {
	if add && reason == "" {
		return fmt.Errorf("--reason is required: every stage that holds the release back says it")
	}
	c, obj, err := a.clientAndArtifact(ctx, name)
	if err != nil {
		return err
	}
	listed := rejectList(obj)
	var digest string
	if add {
		if digest, err = findArtifact(obj, prefix); err != nil {
			return err
		}
	} else if digest, err = findIn(listed, prefix, "rejected by KCLArtifact "+obj.Name); err != nil {
		return err
	}
	user, err := a.whoAmI(ctx, c)
	if err != nil {
		return err
	}
	annotations := map[string]any{kclv1.RejectedByAnnotation: user, meta.ReconcileRequestAnnotation: time.Now().Format(time.RFC3339Nano)}
	if add {
		listed = append(slices.DeleteFunc(listed, func(d string) bool { return d == digest }), digest)
		annotations[kclv1.RejectReasonAnnotation] = reason
		a.log.Actionf("rejecting %s of KCLArtifact %s in %s namespace as %s", digest, obj.Name, obj.Namespace, user)
	} else {
		listed = slices.DeleteFunc(listed, func(d string) bool { return d == digest })
		a.log.Actionf("lifting the rejection of %s of KCLArtifact %s in %s namespace as %s", digest, obj.Name, obj.Namespace, user)
	}
	annotations[kclv1.RejectAnnotation] = strings.Join(listed, ",")
	if len(listed) == 0 {
		annotations[kclv1.RejectAnnotation] = nil
	}
	r := ref{gvk: kclartifactGVK, namespace: obj.Namespace, name: obj.Name}
	if err := mergePatch(ctx, c, r, map[string]any{"metadata": map[string]any{"annotations": annotations}}); err != nil {
		return err
	}
	if add {
		a.log.Successf("KCLArtifact %s: %s rejected by %s", obj.Name, digest, user)
	} else {
		a.log.Successf("KCLArtifact %s: the rejection of %s is lifted", obj.Name, digest)
	}
	return nil
}

func rejectList(obj *kclv1.KCLArtifact) []string {
	var out []string
	for _, d := range strings.Split(obj.GetAnnotations()[kclv1.RejectAnnotation], ",") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

// findArtifact is the digest of obj's artifact (history or waiting) that prefix names.
func findArtifact(obj *kclv1.KCLArtifact, prefix string) (string, error) {
	var digests []string
	for _, e := range obj.Status.History {
		digests = append(digests, e.Digest)
	}
	if p := obj.Status.Promotion; p != nil {
		for _, w := range p.Waiting {
			digests = append(digests, w.Digest)
		}
	}
	return findIn(digests, prefix, "an artifact of KCLArtifact "+obj.Name+" (its history or its waiting artifacts)")
}

// findIn is the one digest of digests that is prefix, or starts with it (8 hex digits at least).
func findIn(digests []string, prefix, what string) (string, error) {
	var found []string
	for _, d := range digests {
		if (d == prefix || len(prefix) >= len("sha256:")+8 && strings.HasPrefix(d, prefix)) && !slices.Contains(found, d) {
			found = append(found, d)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		if len(digests) == 0 {
			digests = []string{"none"}
		}
		return "", fmt.Errorf("digest %s is not %s; there are: %s", prefix, what, strings.Join(digests, ", "))
	}
	return "", fmt.Errorf("digest %s matches %d digests of %s: give more of it", prefix, len(found), what)
}
