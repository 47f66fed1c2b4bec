package fluxkcl

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/inputchange"
)

func (a *app) historyCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "history <name>",
		Short: "List the artifacts a KCLArtifact keeps, newest first",
		Long: `List the artifacts of a KCLArtifact's status.history, newest first: digest, the source revision
rendered, objects, health once published, which is current and which pinned, and, when some
changed, the inputs (argumentsFrom and spec.arguments) that changed since the entry below, e.g.
"web.tag 1.4.2 → 1.4.3"; values read from Secrets stay masked. For a stage (spec.promotion), the
upstream artifact that proved each promoted entry and who approved it (Promoted from; -o yaml has
the whole record). With spec.publish.oci, where each entry was pushed (Pushed: repository, tag
when pushed, OCI digest, signed; flux kcl verify checks it). Any digest not marked missing can be pinned (flux kcl pin).`,
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
			headers, rows := historyTable(obj)
			return printTable(a.stdout, headers, rows)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "the format of the history: table, json or yaml")
	return cmd
}

// historyTable is the history's rows; the Promoted from and Inputs columns come last, each only
// when an entry was promoted or its inputs differ from the one below it, so that a history
// without either keeps the columns it always had (State last).
func historyTable(obj *kclv1.KCLArtifact) ([]string, [][]string) {
	headers := []string{"Digest", "Source revision", "Objects", "Health", "Published", "State"}
	rows := make([][]string, 0, len(obj.Status.History))
	changed, promoted, pushed, verified := false, false, false, false
	for i, h := range obj.Status.History {
		in := inputChanges(obj.Status.History, i)
		changed = changed || in != "-"
		promoted = promoted || h.Promotion != nil
		pushed = pushed || h.OCI != nil
		verified = verified || h.Verification != nil
		rows = append(rows, []string{h.Digest, truncateHex(orDash(h.SourceRevision)), strconv.Itoa(h.Objects),
			orDash(h.Health), since(h.LastPublished.Time), entryState(obj, h), verificationText(h.Verification), ociText(h.OCI),
			promotionText(h.Promotion), in})
	}
	// the optional columns come last, each only when some entry has something to say in it
	keep := func(col int, on bool) {
		if !on {
			for i := range rows {
				rows[i] = slices.Delete(rows[i], col, col+1)
			}
		}
	}
	keep(len(headers)+3, changed)
	keep(len(headers)+2, promoted)
	keep(len(headers)+1, pushed)
	keep(len(headers), verified)
	if verified {
		headers = append(headers, "Verified")
	}
	if pushed {
		headers = append(headers, "Pushed")
	}
	if promoted {
		headers = append(headers, "Promoted from")
	}
	if changed {
		headers = append(headers, "Inputs")
	}
	return headers, rows
}

// maxInputChanges is how many changed inputs a history row names; the rest are counted.
const maxInputChanges = 3

// inputChanges is what changed in the inputs of history[i] since the entry below it, the
// reason of a new artifact: "web.tag 1.4.2 → 1.4.3". "-" when nothing changed, for the oldest
// entry, and when either entry was rendered before inputs were recorded (no change is claimed).
// Digests are shortened as in the other columns, before a long value is cut.
func inputChanges(history []kclv1.ArtifactHistoryEntry, i int) string {
	if i+1 >= len(history) {
		return "-"
	}
	changes := withoutImpliedImages(inputchange.Changes(history[i+1].Inputs, history[i].Inputs), history[i].Inputs)
	for j := range changes {
		changes[j].From, changes[j].To = truncateHex(changes[j].From), truncateHex(changes[j].To)
	}
	return orDash(inputchange.Text(changes, maxInputChanges))
}

// withoutImpliedImages drops the change of an ImagePolicy's `<as>.image` when the entry records
// the policy's `<as>.tag` too: the image is name:tag@digest, whose parts' own changes say the
// same in fewer words, and a row has room for few (flux kcl diff lists every change).
func withoutImpliedImages(changes []inputchange.Change, inputs []kclv1.InputValue) []inputchange.Change {
	from := make(map[string]string, len(inputs))
	for _, in := range inputs {
		from[in.Name] = in.From
	}
	return slices.DeleteFunc(changes, func(c inputchange.Change) bool {
		prefix, isImage := strings.CutSuffix(c.Name, ".image")
		src := from[c.Name]
		return isImage && !c.Removed && strings.HasPrefix(src, "ImagePolicy/") && from[prefix+".tag"] == src
	})
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
