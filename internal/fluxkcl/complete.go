package fluxkcl

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kcl-flux/kcl-artifact-controller/internal/termsafe"
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

// completeWaiting offers the KCLArtifacts of -n, then the digests their stage waits to publish.
func (a *app) completeWaiting(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return a.completeNames(cmd, args, toComplete)
	}
	if len(args) > 1 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	_, obj, err := a.clientAndArtifact(ctx, args[0])
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var digests []string
	if p := obj.Status.Promotion; p != nil {
		for _, w := range p.Waiting {
			if strings.HasPrefix(w.Digest, toComplete) {
				// the description is what it runs: cobra shows it beside the digest
				digests = append(digests, w.Digest+"\t"+termsafe.Line(runsText(w.SourceRevision, w.Inputs)))
			}
		}
	}
	return digests, cobra.ShellCompDirectiveNoFileComp
}
