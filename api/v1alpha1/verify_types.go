package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Verify names checks by metrics that must hold once the artifact is applied healthy: they run
// every interval from the moment kustomize-controller's health checks pass until duration has
// passed. A check that fails failureLimit times fails the artifact: with spec.remediation it is
// rolled back and quarantined, as after a failed health check; a stage following this
// KCLArtifact promotes only inputs whose artifact passed (its gate verified). A check whose
// Prometheus cannot be reached is neither passed nor failed: the verification waits and says why.
type Verify struct {
	// Interval between two runs of the checks; 30s by default, at least 1s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// Duration the checks run for after the artifact became healthy; it is verified once they
	// have passed for this long (and each passed at least once).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +required
	Duration metav1.Duration `json:"duration"`
	// FailureLimit is how many failed runs of one check fail the artifact; 1 by default.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	FailureLimit int `json:"failureLimit,omitempty"`
	// Checks that must hold, each of its own name.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	// +required
	Checks []VerifyCheck `json:"checks"`
}

// VerifyCheck is one check: a PromQL instant query and a condition over its result.
type VerifyCheck struct {
	// Name of the check, unique in the list.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
	// +required
	Name string `json:"name"`
	// Prometheus is where and what to ask.
	// +required
	Prometheus PrometheusQuery `json:"prometheus"`
	// Condition is a CEL expression over the query's result that must be true: `value` is the
	// value of the result's only sample (`value < 0.05`), `result` the list of its samples, each
	// {labels, value}. The CEL environment and cost limits are those of argumentsFrom
	// expressions.
	// +kubebuilder:validation:MaxLength=4096
	// +required
	Condition string `json:"condition"`
}

// PrometheusQuery is a query of a Prometheus HTTP API.
type PrometheusQuery struct {
	// Address of the Prometheus HTTP API, e.g. http://prometheus.monitoring:9090. It is reached
	// through the same network guard as dependencies (--kcl-deps-allowed-networks and friends):
	// the host's own addresses and private ranges are refused unless the operator allows them.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern="^https?://"
	// +required
	Address string `json:"address"`
	// Query in PromQL, run as an instant query.
	// +kubebuilder:validation:MaxLength=8192
	// +required
	Query string `json:"query"`
	// SecretRef names a Secret of this namespace with the credentials: `token` (a bearer
	// token), or `username` and `password`; `ca.crt` for an https address signed by a private CA.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// Verification results (status.history[].verification.result).
const (
	VerificationRunning = "Verifying"
	VerificationPassed  = "Verified"
	VerificationFailed  = "Failed"
)

// Verification is what the checks of spec.verify said of a history entry's artifact.
type Verification struct {
	// Result is Verifying, Verified or Failed.
	Result string `json:"result"`
	// StartedAt is when the artifact became healthy and the checks started.
	StartedAt metav1.Time `json:"startedAt"`
	// EndsAt is when the checks end, having passed.
	EndsAt metav1.Time `json:"endsAt"`
	// Checks are each check's last verdict.
	// +optional
	Checks []CheckStatus `json:"checks,omitempty"`
}

// CheckStatus is a check's last verdict.
type CheckStatus struct {
	// Name of the check.
	Name string `json:"name"`
	// Verdict of its last run: Passed, Failed, Inconclusive (the metrics could not be read) or
	// Invalid (the check cannot work as written).
	Verdict string `json:"verdict"`
	// Value the query returned, short (e.g. `0.012`, `3 series`).
	// +optional
	Value string `json:"value,omitempty"`
	// Passes and Failures are its passed and failed runs.
	// +optional
	Passes int `json:"passes,omitempty"`
	// +optional
	Failures int `json:"failures,omitempty"`
	// LastRunAt is when it last ran.
	// +optional
	LastRunAt *metav1.Time `json:"lastRunAt,omitempty"`
	// Message says why, for a verdict other than Passed.
	// +optional
	Message string `json:"message,omitempty"`
}

// VerifiedCondition says what the checks of spec.verify say of the artifact served.
const VerifiedCondition string = "Verified"

// Reasons of the Verified condition, and of a rollback after a failed verification.
const (
	VerifyingReason              = "Verifying"
	VerificationPassedReason     = "VerificationPassed"
	VerificationFailedReason     = "VerificationFailed"
	VerificationWaitingReason    = "VerificationWaiting"
	InvalidCheckReason           = "InvalidCheck"
	WaitingForVerificationReason = "WaitingForVerification"
)

// GateVerified is a stage's gate on its upstream's verification (spec.verify of the upstream).
const GateVerified = "verified"
