package provenance

import (
	"regexp"
	"strings"
	"time"
)

// The statement's JSON, after the in-toto v1 and SLSA v1 provenance specifications.
type (
	statement struct {
		Type          string       `json:"_type"`
		Subject       []descriptor `json:"subject"`
		PredicateType string       `json:"predicateType"`
		Predicate     predicate    `json:"predicate"`
	}
	// descriptor is a ResourceDescriptor: at least one of uri and digest is set.
	descriptor struct {
		Name        string            `json:"name,omitempty"`
		URI         string            `json:"uri,omitempty"`
		Digest      map[string]string `json:"digest,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	predicate struct {
		BuildDefinition buildDefinition `json:"buildDefinition"`
		RunDetails      runDetails      `json:"runDetails"`
	}
	buildDefinition struct {
		BuildType            string       `json:"buildType"`
		ExternalParameters   external     `json:"externalParameters"`
		InternalParameters   internal     `json:"internalParameters"`
		ResolvedDependencies []descriptor `json:"resolvedDependencies,omitempty"`
	}
	// internal are the builder's own facts about the build.
	internal struct {
		// DependenciesRecorded: resolvedDependencies lists every kcl.mod package the render
		// resolved (false: they were not kept for this push, and are not listed).
		DependenciesRecorded bool `json:"dependenciesRecorded"`
	}
	external struct {
		Source    source            `json:"source"`
		Path      string            `json:"path,omitempty"`
		Arguments map[string]string `json:"arguments,omitempty"`
		Inputs    []Input           `json:"inputs,omitempty"`
	}
	source struct {
		Kind     string `json:"kind,omitempty"`
		URL      string `json:"url,omitempty"`
		Revision string `json:"revision,omitempty"`
	}
	runDetails struct {
		Builder  builder  `json:"builder"`
		Metadata metadata `json:"metadata"`
	}
	builder struct {
		ID      string            `json:"id"`
		Version map[string]string `json:"version,omitempty"`
	}
	metadata struct {
		InvocationID string `json:"invocationId,omitempty"`
		StartedOn    string `json:"startedOn,omitempty"`
		FinishedOn   string `json:"finishedOn,omitempty"`
	}
)

func (b Build) buildDefinition() buildDefinition {
	return buildDefinition{
		BuildType: BuildType,
		ExternalParameters: external{
			Source:    source{Kind: b.SourceKind, URL: b.SourceURL, Revision: b.SourceRevision},
			Path:      b.Path,
			Arguments: b.Arguments,
			Inputs:    b.Inputs,
		},
		InternalParameters:   internal{DependenciesRecorded: b.DependenciesRecorded},
		ResolvedDependencies: b.resolved(),
	}
}

// resolved lists the source artifact first, then the KCL packages.
func (b Build) resolved() []descriptor {
	var out []descriptor
	if d := b.sourceDescriptor(); d.URI != "" || d.Digest != nil {
		out = append(out, d)
	}
	for _, d := range b.Dependencies {
		out = append(out, descriptor{
			Name: d.Name, URI: d.Source, Digest: digestSet(d.Digest),
			Annotations: nonEmpty(map[string]string{"version": d.Version, "sum": d.Sum}),
		})
	}
	return out
}

// sourceDescriptor is the source: its artifact digest, and for a GitRepository the commit its
// revision names (SLSA's gitCommit digest; another kind's "@sha256:" is not a commit).
func (b Build) sourceDescriptor() descriptor {
	digest := digestSet(b.SourceDigest)
	if c := commitOf(b.SourceRevision); c != "" && b.SourceKind == "GitRepository" {
		if digest == nil {
			digest = map[string]string{}
		}
		digest["gitCommit"] = c
	}
	return descriptor{Name: "source", URI: b.SourceURL, Digest: digest,
		Annotations: nonEmpty(map[string]string{"kind": b.SourceKind, "revision": b.SourceRevision})}
}

func (b Build) runDetails() runDetails {
	return runDetails{
		Builder: builder{ID: b.Controller,
			Version: nonEmpty(map[string]string{"kcl-artifact-controller": b.ControllerVersion, "kcl": b.Engine})},
		Metadata: metadata{InvocationID: b.InvocationID, StartedOn: timestamp(b.StartedOn), FinishedOn: timestamp(b.FinishedOn)},
	}
}

var (
	algHexRE = regexp.MustCompile(`^([a-z0-9]+):([0-9a-f]+)$`)
	commitRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)
	gitRevRE = regexp.MustCompile(`@sha(1|256):([0-9a-f]{40}|[0-9a-f]{64})$`)
)

// digestSet is a DigestSet of "<alg>:<hex>" ({alg: hex}) or of a bare Git commit ({gitCommit:
// hex}); nil for anything else, which is then not claimed as a digest.
func digestSet(s string) map[string]string {
	if m := algHexRE.FindStringSubmatch(s); m != nil {
		return map[string]string{m[1]: m[2]}
	}
	if commitRE.MatchString(s) {
		return map[string]string{"gitCommit": s}
	}
	return nil
}

// commitOf is the commit of a Flux Git revision, "<ref>@sha1:<hex>" or "sha1:<hex>".
func commitOf(revision string) string {
	if !strings.Contains(revision, "@") {
		revision = "@" + revision
	}
	if m := gitRevRE.FindStringSubmatch(revision); m != nil {
		return m[2]
	}
	return ""
}

// nonEmpty drops the empty values; nil when none is left.
func nonEmpty(m map[string]string) map[string]string {
	for k, v := range m {
		if v == "" {
			delete(m, k)
		}
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

func timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
