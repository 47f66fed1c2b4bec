package v1alpha1

// ArgumentsReference reads KCL arguments from an object of the KCLArtifact's namespace.
//
//   - ConfigMap, Secret: each key is an argument name, its value the argument value.
//   - ImagePolicy (image.toolkit.fluxcd.io): the image it selected, as the arguments
//     `<as>.image` (`name:tag`, `@digest` appended when the policy reflects digests), `<as>.name`,
//     `<as>.tag` and `<as>.digest`, all strings.
//   - KCLArtifact: the values another KCLArtifact exports (status.exports), by name.
//   - any other kind the operator allows (`--arguments-from-kinds`): Values, each a CEL
//     expression or a field path over the object. Secrets are read only as kind Secret, never
//     by an expression.
type ArgumentsReference struct {
	// APIVersion of the object, `group/version` (`v1` for the core group). Required for kinds
	// other than ConfigMap, Secret, ImagePolicy and KCLArtifact.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`

	// Kind of the object.
	// +kubebuilder:validation:MinLength=1
	// +required
	Kind string `json:"kind"`

	// Name of the object, in the KCLArtifact's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
	// +required
	Name string `json:"name"`

	// Keys selects the keys of a ConfigMap or Secret, or the exports of a KCLArtifact; all of
	// them when empty. A selected key that is missing is an error unless Optional.
	// +optional
	Keys []string `json:"keys,omitempty"`

	// As is the prefix of an ImagePolicy's arguments (`<as>.image`, `<as>.tag`...); defaults to
	// the policy's name.
	// +kubebuilder:validation:Pattern="^[A-Za-z_][A-Za-z0-9_.-]*$"
	// +optional
	As string `json:"as,omitempty"`

	// Values are the arguments read from an object of another kind.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Values []ArgumentValue `json:"values,omitempty"`

	// Optional tolerates a missing object or key, and an ImagePolicy that selected nothing yet.
	// +optional
	Optional bool `json:"optional,omitempty"`
}

// ArgumentValue is one argument read from an object with a CEL expression or a field path.
// Its value must be a string, a number or a bool; a string stays a string in KCL.
type ArgumentValue struct {
	// Name of the argument, read with `option("<name>")`.
	// +kubebuilder:validation:Pattern="^[A-Za-z_][A-Za-z0-9_.-]*$"
	// +required
	Name string `json:"name"`

	// Expression is CEL over `object`, the object as the API server returns it, e.g.
	// `object.spec.clusterIP` or `object.status.inputs.filter(i, i.id == "web")[0].tag`.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Expression string `json:"expression,omitempty"`

	// FieldPath is a path in the object, e.g. `.spec.clusterIP` or
	// `.status.loadBalancer.ingress[0].ip`; exclusive with Expression.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	FieldPath string `json:"fieldPath,omitempty"`
}

// Export is a value of the render that other KCLArtifacts of the namespace can read with
// argumentsFrom kind KCLArtifact.
type Export struct {
	// Name of the export.
	// +kubebuilder:validation:Pattern="^[A-Za-z_][A-Za-z0-9_.-]*$"
	// +required
	Name string `json:"name"`

	// Expression is CEL over `objects`, the rendered objects, e.g.
	// `objects.filter(o, o.kind == "Service")[0].metadata.name`. Its value must be a string, a
	// number or a bool.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	// +required
	Expression string `json:"expression"`
}

// ExportedValue is the value of an export of the published artifact.
type ExportedValue struct {
	// Name of the export.
	Name string `json:"name"`
	// Value as the program reads it: a string, or a number or bool in its literal form.
	Value string `json:"value"`
	// Literal is the value as a KCL argument: a string JSON-quoted, so that `"1.10"` and the
	// number `1.1` stay apart in the program that reads it.
	Literal string `json:"literal"`
}
