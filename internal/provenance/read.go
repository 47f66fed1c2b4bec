package provenance

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Read is Statement backwards: the Build a statement of this project's render records, for
// `flux kcl verify` to print. It refuses a statement of another type or build type; it checks
// nothing else (the caller has checked the signature and the subject).
func Read(b []byte) (Build, error) {
	var st statement
	if err := json.Unmarshal(b, &st); err != nil {
		return Build{}, fmt.Errorf("the provenance is not an in-toto statement: %w", err)
	}
	if st.Type != StatementType || st.PredicateType != PredicateType || st.Predicate.BuildDefinition.BuildType != BuildType {
		return Build{}, fmt.Errorf("the provenance is a %s of %s, build type %q, not this controller's", st.Type,
			st.PredicateType, st.Predicate.BuildDefinition.BuildType)
	}
	ext, run := st.Predicate.BuildDefinition.ExternalParameters, st.Predicate.RunDetails
	out := Build{SourceKind: ext.Source.Kind, SourceURL: ext.Source.URL, SourceRevision: ext.Source.Revision,
		Path: ext.Path, Arguments: ext.Arguments, Inputs: ext.Inputs,
		DependenciesRecorded: st.Predicate.BuildDefinition.InternalParameters.DependenciesRecorded,
		Controller:           run.Builder.ID, ControllerVersion: run.Builder.Version["kcl-artifact-controller"],
		Engine: run.Builder.Version["kcl"], InvocationID: run.Metadata.InvocationID,
		StartedOn: parseTime(run.Metadata.StartedOn), FinishedOn: parseTime(run.Metadata.FinishedOn)}
	if len(st.Subject) > 0 {
		out.Repository = st.Subject[0].Name
		for alg, hex := range st.Subject[0].Digest {
			out.Manifest = alg + ":" + hex
		}
	}
	for _, d := range st.Predicate.BuildDefinition.ResolvedDependencies {
		if d.Name == "source" {
			out.SourceDigest = digestString(d.Digest, "gitCommit")
			continue
		}
		out.Dependencies = append(out.Dependencies, Dependency{Name: d.Name, Source: d.URI,
			Version: d.Annotations["version"], Sum: d.Annotations["sum"], Digest: digestString(d.Digest, "")})
	}
	return out, nil
}

// digestString is a DigestSet as "<alg>:<hex>" (a gitCommit as the bare commit), the
// algorithm skip left out.
func digestString(set map[string]string, skip string) string {
	var parts []string
	for alg, hex := range set {
		switch alg {
		case skip:
		case "gitCommit":
			parts = append(parts, hex)
		default:
			parts = append(parts, alg+":"+hex)
		}
	}
	return strings.Join(parts, ",")
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339, s)
	return t
}
