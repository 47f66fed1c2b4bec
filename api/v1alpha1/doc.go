// Package v1alpha1 contains API Schema definitions for the kcl v1alpha1 API group.
// +kubebuilder:object:generate=true
// +groupName=kcl.contrib.fluxcd.io
package v1alpha1
