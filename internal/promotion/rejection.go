package promotion

import (
	"cmp"
	"fmt"
	"strings"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// Rejection is a release rejected somewhere in a pipeline (kcl.contrib.fluxcd.io/reject), with
// the KCLArtifact whose annotation holds it.
type Rejection struct {
	kclv1.RejectedRelease
	// Origin names that KCLArtifact as the reader names it: by name in its own namespace.
	Origin string
}

// Covers tells whether the rejection covers an artifact rendered from sourceRevision with
// inputs: the same source revision, and the same values of what both read from the same objects
// (SameInputs). The stages' own arguments differ and do not count: a release is its commit and
// what it read from the cluster, whatever stage renders it.
func (r Rejection) Covers(sourceRevision string, inputs []kclv1.InputValue) bool {
	if r.SourceRevision == "" {
		return false
	}
	return SameInputs(kclv1.WaitingArtifact{SourceRevision: sourceRevision, Inputs: inputs},
		kclv1.ArtifactHistoryEntry{SourceRevision: r.SourceRevision, Inputs: r.Inputs})
}

// String names the release by its source revision and, since a release is also what it read
// from the cluster (an image tag), by the rejected artifact whose inputs those are: the values
// themselves stay out of messages, which events carry.
func (r Rejection) String() string {
	return fmt.Sprintf("%s was rejected by %s in %s (with the inputs of its artifact %s) at %s: %s", r.SourceRevision,
		cmp.Or(r.RejectedBy, "someone unnamed"), r.Origin, shortDigest(r.Digest), stamp(r.RejectedAt.Time), cmp.Or(r.Reason, "no reason given"))
}

// shortDigest is sha256: and the first 12 hex digits of digest, as the browser view shortens them.
func shortDigest(digest string) string {
	algo, hex, ok := strings.Cut(digest, ":")
	if !ok || len(hex) <= 12 {
		return digest
	}
	return algo + ":" + hex[:12]
}

// Rejected is the first rejection covering an artifact of sourceRevision and inputs; nil when
// none does.
func Rejected(rs []Rejection, sourceRevision string, inputs []kclv1.InputValue) *Rejection {
	for i := range rs {
		if rs[i].Covers(sourceRevision, inputs) {
			return &rs[i]
		}
	}
	return nil
}
