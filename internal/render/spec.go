package render

import kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"

// SpecOptions are the options a KCLArtifact's spec sets, for the controller and for render
// --kclartifact alike. The caller adds where the program is (Root, Dir), the argument values,
// the dependencies and the bounds.
func SpecOptions(s kclv1.KCLArtifactSpec) Options {
	return Options{
		Inputs: s.Entries, Settings: s.Settings, Overrides: s.Overrides, PathSelectors: s.PathSelectors,
		SortKeys: s.SortKeys, DisableNone: s.DisableNone, ShowHidden: s.ShowHidden,
		StrictRangeCheck: s.StrictRangeCheck, Format: FormatYAML,
	}
}
