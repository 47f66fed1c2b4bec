package fluxkcl

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

func (a *app) getCommand() *cobra.Command {
	var watchChanges, noHeader bool
	cmd := &cobra.Command{
		Use:   "get [name]",
		Short: "Get the status of KCLArtifacts",
		Long: `Get the status of KCLArtifacts, as flux get does for Flux kinds: the revision rendered, whether
the generated Kustomizations applied it (APPLIED), the deploy phase, and the rollback state.
With --watch, a row is printed again each time it changes, until --timeout or Ctrl+C.`,
		Example: `  flux kcl get -A
  flux kcl get podinfo -n apps --watch`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
			defer cancel()
			items, version, err := a.listArtifacts(ctx, args)
			if err != nil {
				return err
			}
			headers := a.getHeaders(items)
			if noHeader {
				headers = nil
			}
			if err := printTable(a.stdout, headers, a.getRows(items)); err != nil || !watchChanges {
				return err
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return a.watchArtifacts(ctx, args, version, items)
		},
	}
	cmd.Flags().BoolVarP(&watchChanges, "watch", "w", false, "after listing, print each row again when it changes, until --timeout")
	cmd.Flags().BoolVar(&noHeader, "no-header", false, "skip the header when printing the results")
	return cmd
}

// watchArtifacts prints the row of each KCLArtifact that changes after the list at version, as
// flux get --watch does; status updates that leave the row as it was print nothing.
func (a *app) watchArtifacts(ctx context.Context, args []string, version string, listed []kclv1.KCLArtifact) error {
	cfg, err := a.restConfig()
	if err != nil {
		return err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: newScheme()})
	if err != nil {
		return err
	}
	opts := []client.ListOption{client.InNamespace(a.namespace()), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: version}}}
	if len(args) > 0 {
		opts = append(opts, client.MatchingFields{"metadata.name": args[0]})
	}
	w, err := c.Watch(ctx, &kclv1.KCLArtifactList{}, opts...)
	if err != nil {
		return clusterError(err)
	}
	printed := map[string]string{}
	// the rows keep the columns of the list above them
	cols := columnsOf(listed)
	row := func(obj *kclv1.KCLArtifact) []string { return a.getRow(obj, cols) }
	for i := range listed {
		printed[listed[i].Namespace+"/"+listed[i].Name] = strings.Join(row(&listed[i]), "\t")
	}
	return eachChange(ctx, w, func(o runtime.Object) error {
		obj, isArtifact := o.(*kclv1.KCLArtifact)
		if !isArtifact {
			return nil
		}
		row := row(obj)
		key, text := obj.Namespace+"/"+obj.Name, strings.Join(row, "\t")
		if printed[key] == text {
			return nil
		}
		printed[key] = text
		return printTable(a.stdout, nil, [][]string{row})
	})
}

// listArtifacts lists the KCLArtifacts of -n (or -A), only args[0] when given; none is an error,
// as in flux get.
func (a *app) listArtifacts(ctx context.Context, args []string) ([]kclv1.KCLArtifact, string, error) {
	c, err := a.newClient()
	if err != nil {
		return nil, "", err
	}
	var list kclv1.KCLArtifactList
	if err := c.List(ctx, &list, client.InNamespace(a.namespace())); err != nil {
		return nil, "", clusterError(err)
	}
	items := list.Items
	if len(args) > 0 {
		items = nil
		for _, it := range list.Items {
			if it.Name == args[0] {
				items = append(items, it)
			}
		}
		if len(items) == 0 {
			return nil, "", fmt.Errorf("KCLArtifact object '%s' not found in %s namespace", args[0], namespaceText(a.namespace()))
		}
	}
	if len(items) == 0 {
		return nil, "", fmt.Errorf("no KCLArtifact objects found in %s namespace", namespaceText(a.namespace()))
	}
	return items, list.ResourceVersion, nil
}

// getColumns are the optional columns of get: each only when some listed KCLArtifact has
// something to say in it, so that a cluster without stages or pushes keeps the table it always had.
type getColumns struct{ stages, pushes, verifies bool }

func columnsOf(items []kclv1.KCLArtifact) getColumns {
	return getColumns{stages: hasStages(items),
		pushes:   slices.ContainsFunc(items, func(it kclv1.KCLArtifact) bool { return it.Spec.Publish != nil }),
		verifies: slices.ContainsFunc(items, func(it kclv1.KCLArtifact) bool { return it.Spec.Verify != nil })}
}

// getHeaders are flux get's columns and ours; Upstream and Gate only when a stage
// (spec.promotion) is listed, Pushed only when one publishes out of the cluster.
func (a *app) getHeaders(items []kclv1.KCLArtifact) []string {
	h := []string{"Name", "Revision", "Suspended", "Ready", "Applied", "Phase", "Rollback"}
	cols := columnsOf(items)
	if cols.stages {
		h = append(h, "Upstream", "Gate")
	}
	if cols.verifies {
		h = append(h, "Verified")
	}
	if cols.pushes {
		h = append(h, "Pushed")
	}
	h = append(h, "Message")
	if a.allNamespaces {
		h = append([]string{"Namespace"}, h...)
	}
	return h
}

func (a *app) getRows(items []kclv1.KCLArtifact) [][]string {
	cols := columnsOf(items)
	rows := make([][]string, 0, len(items))
	for i := range items {
		rows = append(rows, a.getRow(&items[i], cols))
	}
	return rows
}

func (a *app) getRow(it *kclv1.KCLArtifact, cols getColumns) []string {
	ready, msg := readyStatus(it.Status.Conditions)
	revision := ""
	if it.Status.Artifact != nil {
		revision = it.Status.Artifact.Revision
	}
	row := []string{it.Name, truncateHex(revision), boolText(it.Spec.Suspend), ready,
		applied(it), orDash(it.Status.Phase), rollbackState(it)}
	if cols.stages {
		row = append(row, upstreamName(it), gateState(it))
	}
	if cols.verifies {
		row = append(row, verifiedState(it))
	}
	if cols.pushes {
		row = append(row, pushState(it))
	}
	row = append(row, truncateHex(msg))
	if a.allNamespaces {
		row = append([]string{it.Namespace}, row...)
	}
	return row
}

// hasStages tells whether any of items follows an upstream.
func hasStages(items []kclv1.KCLArtifact) bool {
	return slices.ContainsFunc(items, func(it kclv1.KCLArtifact) bool { return it.Spec.Promotion != nil })
}

// verifiedState is what the checks of spec.verify say of the current artifact: the condition's
// status and each check's last verdict and value; "-" without spec.verify.
func verifiedState(it *kclv1.KCLArtifact) string {
	if it.Spec.Verify == nil {
		return "-"
	}
	c := apimeta.FindStatusCondition(it.Status.Conditions, kclv1.VerifiedCondition)
	if c == nil {
		return "Unknown"
	}
	state := string(c.Status)
	if c.Status != metav1.ConditionTrue {
		state += " (" + c.Reason + ")"
	}
	if len(it.Status.History) > 0 && it.Status.Artifact != nil && it.Status.History[0].Digest == it.Status.Artifact.Digest {
		if t := verificationText(it.Status.History[0].Verification); t != "-" {
			state += ": " + t
		}
	}
	return state
}

// verificationText is a verification's result and each check's last verdict and value:
// "Verified: error-rate=0.012"; "-" for none.
func verificationText(v *kclv1.Verification) string {
	if v == nil {
		return "-"
	}
	parts := make([]string, 0, len(v.Checks))
	for _, c := range v.Checks {
		p := c.Name + "=" + orDash(c.Value)
		if c.Verdict != "Passed" {
			p += " " + strings.ToLower(c.Verdict)
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return v.Result
	}
	return v.Result + " " + strings.Join(parts, ", ")
}

// pushState is where spec.publish.oci pushed the current artifact, `<repository>:<tag>@<digest>`,
// or why it could not; "-" when it does not publish out of the cluster.
func pushState(it *kclv1.KCLArtifact) string {
	if c := apimeta.FindStatusCondition(it.Status.Conditions, kclv1.PushFailedCondition); c != nil && c.Status == metav1.ConditionTrue {
		return "False (" + c.Reason + ")"
	}
	if len(it.Status.History) == 0 || it.Status.Artifact == nil || it.Status.History[0].Digest != it.Status.Artifact.Digest {
		return "-"
	}
	return ociText(it.Status.History[0].OCI)
}

// ociText is an OCI record as `<repository>:<tag>@<digest>` (signed: `, signed`); "-" for none.
func ociText(rec *kclv1.OCIRecord) string {
	if rec == nil {
		return "-"
	}
	s := strings.TrimPrefix(rec.URL, "oci://")
	if rec.Tag != "" {
		s += ":" + rec.Tag
	}
	s += "@" + truncateHex(rec.Digest)
	if rec.Signed {
		s += ", signed"
	}
	return s
}

// applied is the KustomizationReady condition: did the generated Kustomizations apply the
// current artifact; "-" when none is generated.
func applied(it *kclv1.KCLArtifact) string {
	c := apimeta.FindStatusCondition(it.Status.Conditions, kclv1.KustomizationReadyCondition)
	if c == nil {
		return "-"
	}
	if c.Status == "True" {
		return "True"
	}
	return fmt.Sprintf("%s (%s)", c.Status, c.Reason)
}

// rollbackState sums up status.remediation: the artifact rolled back from, or the failures
// counted so far.
func rollbackState(it *kclv1.KCLArtifact) string {
	r := it.Status.Remediation
	switch {
	case r == nil:
		return "-"
	case r.Quarantined != nil:
		return fmt.Sprintf("rolled back from %s to %s", truncateHex(r.Quarantined.Digest), truncateHex(r.Quarantined.RolledBackTo))
	case r.Failures > 0:
		return fmt.Sprintf("%d failure(s) of %s", r.Failures, truncateHex(r.Digest))
	}
	return "-"
}
