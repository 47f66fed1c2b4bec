package fluxkcl

import (
	"context"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

func (a *app) historyCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "history <name>",
		Short: "List the artifacts a KCLArtifact keeps, newest first",
		Long: `List the artifacts of a KCLArtifact's status.history, newest first: digest, the source revision
rendered, objects, health once published, and which is current and which pinned. Any digest not
marked missing can be pinned (flux kcl pin).`,
		Example:           `  flux kcl history podinfo -n apps`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: a.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
			defer cancel()
			_, obj, err := a.clientAndArtifact(ctx, args[0])
			if err != nil {
				return err
			}
			if output != "table" {
				return a.printData(output, obj.Status.History)
			}
			return printTable(a.stdout, []string{"Digest", "Source revision", "Objects", "Health", "Published", "State"}, historyRows(obj))
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "the format of the history: table, json or yaml")
	return cmd
}

func historyRows(obj *kclv1.KCLArtifact) [][]string {
	rows := make([][]string, 0, len(obj.Status.History))
	for _, h := range obj.Status.History {
		rows = append(rows, []string{h.Digest, truncateHex(orDash(h.SourceRevision)), strconv.Itoa(h.Objects),
			orDash(h.Health), since(h.LastPublished.Time), entryState(obj, h)})
	}
	return rows
}

// entryState marks the current, pinned, quarantined and missing entries.
func entryState(obj *kclv1.KCLArtifact, h kclv1.ArtifactHistoryEntry) string {
	var s []string
	if obj.Status.Artifact != nil && obj.Status.Artifact.Digest == h.Digest {
		s = append(s, "current")
	}
	if obj.Spec.PinnedDigest == h.Digest {
		s = append(s, "pinned")
	}
	if r := obj.Status.Remediation; r != nil && r.Quarantined != nil && r.Quarantined.Digest == h.Digest {
		s = append(s, "quarantined")
	}
	if h.Missing {
		s = append(s, "missing")
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ",")
}
