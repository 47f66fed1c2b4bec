package fluxkcl

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/spf13/cobra"
	authv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

func (a *app) approveCommand() *cobra.Command {
	var exemption string
	cmd := &cobra.Command{
		Use:   "approve <name> [<digest>]",
		Short: "Approve an artifact a stage waits to publish (spec.promotion.approval)",
		Long: `Approve a waiting artifact of a stage (status.promotion.waiting): by digest, or a unique prefix
of one (sha256:1234abcd), or the newest waiting one without a digest. The approval names who gave
it, as the API server authenticates the caller (SelfSubjectReview; the kubeconfig's user when that
API is refused), and asks the controller to look at once. The stage publishes the artifact once
its other gates (upstream health, soak, windows) are open too.

With --exemption, the approval also lets this one artifact through a stopped line (flux kcl
stop-line), on any stage; history records the reason with the approver.

The same with kubectl:
  kubectl annotate kclartifact <name> -n <namespace> --overwrite \
    kcl.contrib.fluxcd.io/approve=<digest> \
    kcl.contrib.fluxcd.io/approved-by=<you> \
    reconcile.fluxcd.io/requestedAt="$(date +%s)"`,
		Example: `  flux kcl approve production -n apps
  flux kcl approve production sha256:1234abcd -n apps
  flux kcl approve production sha256:1234abcd -n apps --exemption "hotfix for incident 42"`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: a.completeWaiting,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
			defer cancel()
			return a.approve(ctx, args, exemption)
		},
	}
	cmd.Flags().StringVar(&exemption, "exemption", "", "let the artifact through a stopped line too, for this reason")
	return cmd
}

func (a *app) approve(ctx context.Context, args []string, exemption string) error {
	c, obj, err := a.clientAndArtifact(ctx, args[0])
	if err != nil {
		return err
	}
	prefix := ""
	if len(args) > 1 {
		prefix = args[1]
	}
	w, err := findWaiting(obj, prefix)
	if err != nil {
		return err
	}
	user, err := a.whoAmI(ctx, c)
	if err != nil {
		return err
	}
	a.log.Actionf("approving %s of KCLArtifact %s in %s namespace as %s", w.Digest, obj.Name, obj.Namespace, user)
	r := ref{gvk: kclartifactGVK, namespace: obj.Namespace, name: obj.Name}
	annotations := map[string]any{
		kclv1.ApproveAnnotation:         w.Digest,
		kclv1.ApprovedByAnnotation:      user,
		kclv1.ExemptionAnnotation:       nil,
		meta.ReconcileRequestAnnotation: time.Now().Format(time.RFC3339Nano),
	}
	if exemption != "" {
		annotations[kclv1.ExemptionAnnotation] = exemption
	}
	if err := mergePatch(ctx, c, r, map[string]any{"metadata": map[string]any{"annotations": annotations}}); err != nil {
		return err
	}
	a.log.Successf("KCLArtifact %s: %s approved by %s", obj.Name, w.Digest, user)
	printApproved(a.stdout, obj, w, user)
	skip := []string{kclv1.GateApproval}
	if exemption != "" {
		skip = append(skip, kclv1.GateLine)
	}
	if closed := closedGates(obj, w.Gates, skip...); closed != "" {
		a.log.Waitingf("still waiting for: %s", closed)
	}
	return nil
}

// findWaiting is the waiting artifact of digest or of a unique digest prefix, the newest without
// one; the errors say what waits.
func findWaiting(obj *kclv1.KCLArtifact, prefix string) (kclv1.WaitingArtifact, error) {
	if obj.Spec.Promotion == nil {
		return kclv1.WaitingArtifact{}, fmt.Errorf("KCLArtifact %s in %s namespace is not a stage (no spec.promotion): nothing to approve", obj.Name, obj.Namespace)
	}
	var waiting []kclv1.WaitingArtifact
	if p := obj.Status.Promotion; p != nil {
		waiting = p.Waiting
	}
	if len(waiting) == 0 {
		return kclv1.WaitingArtifact{}, fmt.Errorf("KCLArtifact %s in %s namespace has no artifact waiting to be published: nothing to approve", obj.Name, obj.Namespace)
	}
	if prefix == "" {
		return waiting[0], nil
	}
	var found []kclv1.WaitingArtifact
	for _, w := range waiting {
		if w.Digest == prefix || (len(prefix) >= len("sha256:")+8 && strings.HasPrefix(w.Digest, prefix)) {
			found = append(found, w)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return kclv1.WaitingArtifact{}, fmt.Errorf("digest %s is not waiting in KCLArtifact %s; waiting: %s", prefix, obj.Name, waitingDigests(waiting))
	}
	return kclv1.WaitingArtifact{}, fmt.Errorf("digest %s matches %d waiting artifacts of KCLArtifact %s: give more of it", prefix, len(found), obj.Name)
}

func waitingDigests(waiting []kclv1.WaitingArtifact) string {
	d := make([]string, len(waiting))
	for i, w := range waiting {
		d[i] = w.Digest
	}
	return strings.Join(d, ", ")
}

// whoAmI is the caller as the API server authenticates it (the user the controller records
// anyway): SelfSubjectReview, or, where that API is refused or not served, the kubeconfig's user.
func (a *app) whoAmI(ctx context.Context, c client.Client) (string, error) {
	review := &authv1.SelfSubjectReview{}
	err := c.Create(ctx, review)
	if err == nil && review.Status.UserInfo.Username != "" {
		return review.Status.UserInfo.Username, nil
	}
	if err != nil && !apierrors.IsForbidden(err) && !apierrors.IsNotFound(err) &&
		!apierrors.IsMethodNotSupported(err) && !apimeta.IsNoMatchError(err) {
		return "", fmt.Errorf("asking the API server who you are (SelfSubjectReview): %w", err)
	}
	user := a.kubeconfigUser()
	if user == "" {
		return "", fmt.Errorf("the API server does not say who you are (SelfSubjectReview: %v) and the kubeconfig names no user", err)
	}
	a.log.Warningf("the API server does not say who you are (SelfSubjectReview refused): recording the kubeconfig's user %s", user)
	return user, nil
}

// kubeconfigUser is --as, or the name of the user of the kubeconfig context in use.
func (a *app) kubeconfigUser() string {
	if a.kube.Impersonate != nil && *a.kube.Impersonate != "" {
		return *a.kube.Impersonate
	}
	if a.kube.AuthInfoName != nil && *a.kube.AuthInfoName != "" {
		return *a.kube.AuthInfoName
	}
	if c := a.kubeContext(); c != nil {
		return c.AuthInfo
	}
	return ""
}

// printApproved says on stdout what was approved: what the stage will run.
func printApproved(out io.Writer, obj *kclv1.KCLArtifact, w kclv1.WaitingArtifact, user string) {
	fmt.Fprintf(out, "KCLArtifact %s/%s: approved\n", obj.Namespace, obj.Name)
	for _, kv := range [][2]string{
		{"digest", w.Digest}, {"revision", w.Revision}, {"source revision", orDash(w.SourceRevision)},
		{"inputs", orDash(inputsText(w.Inputs, 0))}, {"approved by", user},
	} {
		fmt.Fprintf(out, "  %-16s %s\n", kv[0]+":", termsafe.Line(kv[1]))
	}
}
