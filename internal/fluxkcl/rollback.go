package fluxkcl

import (
	"fmt"

	"github.com/spf13/cobra"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

func (a *app) rollbackCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "rollback <name>",
		Short: "Pin the newest healthy artifact before the current one",
		Long: `Roll a KCLArtifact back by hand: pin (spec.pinnedDigest) the newest artifact of status.history,
older than the current one, that was applied and healthy and is still in storage. Prints the spec
change to commit to Git; flux kcl unpin ends it.`,
		Example:           `  flux kcl rollback podinfo -n apps`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.pinTo(cmd.Context(), args[0], func(obj *kclv1.KCLArtifact) (string, error) {
				target, err := previousHealthy(obj)
				if err != nil {
					return "", err
				}
				a.log.Actionf("rolling back KCLArtifact %s to %s (source %s)", obj.Name, target.Digest, truncateHex(orDash(target.SourceRevision)))
				return target.Digest, nil
			})
		},
	}
}

// previousHealthy is the newest entry after the current one that was healthy, is in storage and
// is not the artifact remediation rolled back from.
func previousHealthy(obj *kclv1.KCLArtifact) (kclv1.ArtifactHistoryEntry, error) {
	current := ""
	if obj.Status.Artifact != nil {
		current = obj.Status.Artifact.Digest
	}
	quarantined := ""
	if r := obj.Status.Remediation; r != nil && r.Quarantined != nil {
		quarantined = r.Quarantined.Digest
	}
	seen := current == ""
	for _, h := range obj.Status.History {
		if h.Digest == current {
			seen = true
			continue
		}
		if seen && h.Health == kclv1.HealthHealthy && !h.Missing && h.Digest != quarantined {
			return h, nil
		}
	}
	return kclv1.ArtifactHistoryEntry{}, fmt.Errorf("KCLArtifact %s has no healthy artifact older than the current one in its history", obj.Name)
}
