package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PhaseTemplates are the per-phase settings of the generated Kustomizations.
type PhaseTemplates struct {
	// Pre is the phase applied and waited for before everything else.
	// +optional
	Pre *PhaseTemplate `json:"pre,omitempty"`
	// Main is the phase of the objects without a phase.
	// +optional
	Main *PhaseTemplate `json:"main,omitempty"`
	// Post is the phase applied once main is healthy.
	// +optional
	Post *PhaseTemplate `json:"post,omitempty"`
}

// PhaseTemplate overrides the template for one phase's Kustomization.
type PhaseTemplate struct {
	// Timeout of this phase's apply and health checks (for pre and post, the Jobs' runs);
	// defaults to the template's timeout.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// PhaseStatus is the state of one deploy phase.
type PhaseStatus struct {
	// Name of the phase: pre, main or post.
	Name string `json:"name"`
	// Objects is the number of objects of the phase in the current artifact.
	Objects int `json:"objects"`
	// Kustomization is the generated Kustomization that applies the phase.
	// +optional
	Kustomization string `json:"kustomization,omitempty"`
	// State of the phase at the current artifact: Waiting (for the phase before it), Applying,
	// Ready or Failed.
	// +optional
	State string `json:"state,omitempty"`
	// Message says why the phase is not Ready: for a failed Job, which Job and why.
	// +optional
	Message string `json:"message,omitempty"`
}
