// Package features lists the controller's feature gates (--feature-gates), Flux's way.
package features

import (
	runtimectrl "github.com/fluxcd/pkg/runtime/controller"
	feathelper "github.com/fluxcd/pkg/runtime/features"
)

const (
	// CacheSecretsAndConfigMaps reads the ConfigMaps and Secrets of argumentsFrom through the
	// manager's cache instead of the API: fewer requests, more memory, and list/watch on all of
	// them cluster-wide. Off by default, as in kustomize-controller.
	CacheSecretsAndConfigMaps = runtimectrl.FeatureGateCacheSecretsAndConfigMaps
	// DisableConfigWatchers stops watching the labelled ConfigMaps and Secrets of argumentsFrom:
	// their changes are then picked up at the next interval only.
	DisableConfigWatchers = runtimectrl.FeatureGateDisableConfigWatchers
)

// FeatureGates are the supported gates with their defaults.
func FeatureGates() map[string]bool {
	return map[string]bool{
		CacheSecretsAndConfigMaps: false,
		DisableConfigWatchers:     false,
	}
}

// Enabled tells whether a gate is on; a gate that was never loaded is off.
func Enabled(gate string) bool {
	on, err := feathelper.Enabled(gate)
	return err == nil && on
}
