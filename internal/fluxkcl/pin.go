package fluxkcl

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
)

// gitWarning is said after every spec change: the KCLArtifact usually comes from Git, whose next
// apply (a Flux Kustomization) sets the spec back.
const gitWarning = "this changed the cluster only: commit the change above to Git, or the next apply from Git reverts it"

func (a *app) pinCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "pin <name> <digest>",
		Short: "Publish an artifact of the history and keep it published",
		Long: `Set spec.pinnedDigest: the controller publishes that artifact of status.history, neither retries
nor rolls back, until unpinned. The digest may be a unique prefix (sha256:1234abcd). Prints the
spec change to commit to Git.`,
		Example:           `  flux kcl pin podinfo sha256:1234abcd -n apps`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.pinTo(cmd.Context(), args[0], func(obj *kclv1.KCLArtifact) (string, error) {
				entry, err := findEntry(obj, args[1])
				return entry.Digest, err
			})
		},
	}
}

func (a *app) unpinCommand() *cobra.Command {
	return &cobra.Command{
		Use:               "unpin <name>",
		Short:             "Remove spec.pinnedDigest: publish what the inputs render again",
		Example:           `  flux kcl unpin podinfo -n apps`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.pinTo(cmd.Context(), args[0], func(*kclv1.KCLArtifact) (string, error) { return "", nil })
		},
	}
}

// pinTo sets spec.pinnedDigest of KCLArtifact name to the digest pick chooses from it ("" unpins),
// as pin, unpin and rollback do, within --timeout.
func (a *app) pinTo(ctx context.Context, name string, pick func(*kclv1.KCLArtifact) (string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	c, obj, err := a.clientAndArtifact(ctx, name)
	if err != nil {
		return err
	}
	digest, err := pick(obj)
	if err != nil {
		return err
	}
	return a.setPin(ctx, c, obj, digest)
}

// findEntry is the history entry of digest or of a unique digest prefix, which must still be
// in storage.
func findEntry(obj *kclv1.KCLArtifact, prefix string) (kclv1.ArtifactHistoryEntry, error) {
	found, err := matchEntry(obj, prefix, false)
	if err == nil && found.Missing {
		return kclv1.ArtifactHistoryEntry{}, fmt.Errorf("artifact %s of KCLArtifact %s is missing from storage", found.Digest, obj.Name)
	}
	return found, err
}

// matchEntry is the history entry whose digest starts with prefix (with oci, or whose OCI
// digest does): one, and the prefix long enough to tell.
func matchEntry(obj *kclv1.KCLArtifact, prefix string, oci bool) (kclv1.ArtifactHistoryEntry, error) {
	var found []kclv1.ArtifactHistoryEntry
	for _, h := range obj.Status.History {
		matches := strings.HasPrefix(h.Digest, prefix) || oci && h.OCI != nil && strings.HasPrefix(h.OCI.Digest, prefix)
		if matches && len(prefix) >= len("sha256:")+8 {
			found = append(found, h)
		}
	}
	switch {
	case len(found) == 0:
		return kclv1.ArtifactHistoryEntry{}, fmt.Errorf("digest %s not found in the history of KCLArtifact %s (flux kcl history %s)", prefix, obj.Name, obj.Name)
	case len(found) > 1:
		return kclv1.ArtifactHistoryEntry{}, fmt.Errorf("digest %s matches %d artifacts of KCLArtifact %s: give more of it", prefix, len(found), obj.Name)
	}
	return found[0], nil
}

// setPin patches spec.pinnedDigest of obj (removes it when digest is ""), prints the change to
// commit, waits until the controller has published accordingly and the Kustomizations have
// applied it.
func (a *app) setPin(ctx context.Context, c client.Client, obj *kclv1.KCLArtifact, digest string) error {
	name := obj.Name
	r := ref{gvk: kclartifactGVK, namespace: obj.Namespace, name: name}
	// null removes the field in a merge patch
	var pin any
	if digest != "" {
		pin = digest
	}
	if err := mergePatch(ctx, c, r, map[string]any{"spec": map[string]any{"pinnedDigest": pin}}); err != nil {
		return err
	}
	if digest == "" {
		a.log.Successf("KCLArtifact %s unpinned", name)
		fmt.Fprintf(a.stdout, "# KCLArtifact %s/%s: remove spec.pinnedDigest\n", obj.Namespace, name)
	} else {
		a.log.Successf("KCLArtifact %s pinned to %s", name, digest)
		// the digest is a history entry's, which the API server admitted as pinnedDigest
		fmt.Fprintf(a.stdout, "# KCLArtifact %s/%s\nspec:\n  pinnedDigest: %s\n", obj.Namespace, name, termsafe.Line(digest))
	}
	a.log.Warningf("%s", gitWarning)
	u, err := a.requestAndWait(ctx, c, r)
	if err != nil {
		return err
	}
	a.log.Successf("published revision %s", statusString(u, "artifact", "revision"))
	// apply it now: a rollback that waits for the Kustomizations' interval is no rollback
	return a.reconcileKustomizations(ctx, c, obj)
}
