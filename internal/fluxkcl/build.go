package fluxkcl

import "github.com/spf13/cobra"

// buildCommand is `flux kcl build kclartifact`, the local counterpart of `flux build kustomization`.
func (a *app) buildCommand() *cobra.Command {
	return &cobra.Command{Use: "build", Short: "Render a KCLArtifact locally, as the controller would (needs the KCL engine)"}
}

// diffKCLArtifactCommand is `flux kcl diff kclartifact`, the local counterpart of
// `flux diff kustomization`.
func (a *app) diffKCLArtifactCommand() *cobra.Command {
	return &cobra.Command{Use: "kclartifact", Short: "Compare a local render of a KCLArtifact with the cluster (needs the KCL engine)"}
}
