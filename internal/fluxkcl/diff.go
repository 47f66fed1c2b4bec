package fluxkcl

import "github.com/spf13/cobra"

// diffCommand is `flux kcl diff <name>`: the artifact server's diff between two kept artifacts;
// `flux kcl diff kclartifact` is the local one.
func (a *app) diffCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "diff <name>", Short: "Show what changed between two artifacts of a KCLArtifact"}
	cmd.AddCommand(a.diffKCLArtifactCommand())
	return cmd
}
