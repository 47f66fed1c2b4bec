package fluxkcl

import "github.com/spf13/cobra"

// uiCommand is `flux kcl ui`: the browser view through a port-forward to the leader Pod.
func (a *app) uiCommand() *cobra.Command {
	return &cobra.Command{Use: "ui", Short: "Open the browser view of artifacts, history and diffs"}
}
