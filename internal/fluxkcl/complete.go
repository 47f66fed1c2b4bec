package fluxkcl

import (
	"context"
	"strings"

	"github.com/spf13/cobra"
)

// completeNames offers the KCLArtifacts of -n for the first argument; flux's completion runs
// `flux-kcl __complete ...` and discards stderr, so errors just give no completion.
func (a *app) completeNames(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	items, _, err := a.listArtifacts(ctx, nil)
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, it := range items {
		if strings.HasPrefix(it.Name, toComplete) {
			names = append(names, it.Name)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
