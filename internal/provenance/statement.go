package provenance

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Identifiers of the statement.
const (
	StatementType = "https://in-toto.io/Statement/v1"
	PredicateType = "https://slsa.dev/provenance/v1"
	// BuildType names this project's render; its externalParameters are those written here.
	BuildType = "https://kcl-flux.github.io/kcl-artifact-controller/render/v1"
)

// Build is one render, what its provenance records.
type Build struct {
	// Repository and Manifest are the subject: the OCI repository (host/path, no tag) and the
	// artifact image's manifest digest, "sha256:<hex>".
	Repository, Manifest string

	// The source rendered: kind (GitRepository, OCIRepository, Bucket...), URL, Flux revision
	// (<ref>@sha1:<commit>) and the digest of the source artifact.
	SourceKind, SourceURL, SourceRevision, SourceDigest string

	// Path is the KCL package's directory within the source.
	Path string
	// Arguments are the render's arguments by name, Secret-derived values already "***".
	Arguments map[string]string
	// Inputs are the cluster objects arguments were read from.
	Inputs []Input
	// Dependencies are the KCL packages kcl.mod.lock resolved; DependenciesRecorded says the
	// builder knew them (false: a push whose render's resolution was not kept, after a restart,
	// which the statement says rather than claiming there were none).
	Dependencies         []Dependency
	DependenciesRecorded bool

	// Engine is the KCL engine version.
	Engine string
	// Controller is the builder id: a URI naming the controller, ControllerVersion its version.
	Controller, ControllerVersion string
	// InvocationID names this render (the reconcile's), StartedOn and FinishedOn its times.
	InvocationID          string
	StartedOn, FinishedOn time.Time
}

// Input is a cluster object an argument was read from, as status.history[].inputs records it.
type Input struct {
	// Name of the argument.
	Name string `json:"name"`
	// From is the object, "<Kind>/<name>".
	From string `json:"from,omitempty"`
	// Digest of what was read, "<algorithm>:<hex>", when the caller has one.
	Digest string `json:"digest,omitempty"`
}

// Dependency is one package of kcl.mod.lock, as it was resolved.
type Dependency struct {
	Name, Version string
	// Source is where it came from: oci://host/repo:tag, a Git URL, or a local path.
	Source string
	// Digest is the OCI manifest digest ("sha256:<hex>") or the Git commit.
	Digest string
	// Sum is kcl's checksum of the package directory (kcl.mod.lock's sum).
	Sum string
}

var sha256RE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Statement is the in-toto v1 statement of b's SLSA v1 provenance, JSON. The same Build gives
// the same bytes.
func Statement(b Build) ([]byte, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(statement{
		Type:          StatementType,
		Subject:       []descriptor{{Name: b.Repository, Digest: digestSet(b.Manifest)}},
		PredicateType: PredicateType,
		Predicate:     predicate{BuildDefinition: b.buildDefinition(), RunDetails: b.runDetails()},
	})
}

// validate refuses what would make a statement without a subject or a builder.
func (b Build) validate() error {
	switch {
	case b.Repository == "":
		return errors.New("provenance: no repository")
	case !sha256RE.MatchString(b.Manifest):
		return fmt.Errorf("provenance: manifest digest %q is not sha256:<64 lowercase hex>", b.Manifest)
	case b.Controller == "":
		return errors.New("provenance: no builder id (Controller)")
	}
	return nil
}
