package manifests

import (
	"crypto/sha256"
	"encoding/hex"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
)

// Split is what StreamPhases wrote.
type Split struct {
	// Refs are the written objects, in order.
	Refs []kclv1.ObjectReference
	// Counts are the objects written per phase.
	Counts map[phases.Phase]int
	// Skipped are objects left out for hooks that are not run (phases.Place).
	Skipped []kclv1.ObjectReference
	// RollbackApart tells whether the objects of a rollback are not placed as in a deploy (Helm
	// hooks of one event or the other): the rollback phases are then written apart, under
	// phases.RollbackPre and RollbackPost, which Counts counts too.
	RollbackApart bool
}

// Phased tells whether any object is in another phase than main.
func (s *Split) Phased() bool {
	if !s.RollbackApart {
		return s.Counts[phases.Pre]+s.Counts[phases.Post] > 0
	}
	return phases.Phased(s.Counts)
}

// StreamPhases checks a YAML stream as Parse does and writes each object to the writer of its
// phase as it reads them, so that only one document's objects are ever in memory. The Jobs of the
// pre and post phases get revision on their Pod template (phases.RevisionAnnotation), so that
// each new artifact runs them again. The objects of a rollback's pre and post phases are written
// to phases.RollbackPre and RollbackPost as well; the caller keeps them only when RollbackApart.
func StreamPhases(r io.Reader, out func(phases.Phase) io.Writer, maxObjects int, revision string) (*Split, error) {
	s := &Split{Counts: map[phases.Phase]int{}}
	err := each(r, maxObjects, func(o *unstructured.Unstructured) error {
		place, err := phases.Place(o.GetAnnotations())
		if err != nil {
			return invalid("%s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		if place.Skipped() {
			s.Skipped = append(s.Skipped, Reference(o))
			return nil
		}
		s.RollbackApart = s.RollbackApart || place.Deploy != place.Rollback
		if (place.Deploy != phases.Main || place.Rollback != phases.Main) && isJob(o) {
			if err := unstructured.SetNestedField(o.Object, revision, "spec", "template", "metadata", "annotations", phases.RevisionAnnotation); err != nil {
				return invalid("Job %s/%s: %v", o.GetNamespace(), o.GetName(), err)
			}
		}
		b, err := marshal(o.Object)
		if err != nil {
			return err
		}
		if place.Deploy != "" {
			s.Refs = append(s.Refs, Reference(o))
			if err := s.write(out, place.Deploy, b); err != nil {
				return err
			}
		}
		if p := phases.InRollback(place.Rollback); p != "" && p != phases.Main {
			return s.write(out, p, b)
		}
		return nil
	})
	return s, err
}

// write appends one marshalled object to the writer of phase p.
func (s *Split) write(out func(phases.Phase) io.Writer, p phases.Phase, b []byte) error {
	w := out(p)
	if s.Counts[p] > 0 {
		if _, err := io.WriteString(w, "---\n"); err != nil {
			return err
		}
	}
	s.Counts[p]++
	_, err := w.Write(b)
	return err
}

// OutputRevision is the revision StreamPhases gives the pre and post Jobs of a rendered output:
// its hash, which changes with every new artifact and only then.
func OutputRevision(output string) string {
	// in pieces: a copy of a whole output near the size bound would double what a render holds
	h := sha256.New()
	for s := output; len(s) > 0; {
		n := min(len(s), 64<<10)
		_, _ = io.WriteString(h, s[:n])
		s = s[n:]
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func isJob(o *unstructured.Unstructured) bool {
	gvk := o.GroupVersionKind()
	return gvk.Group == "batch" && gvk.Kind == "Job"
}

// PhaseOf is the phase of an object in a deploy, main for one whose annotations are not valid (the
// check that refuses them is StreamPhases').
func PhaseOf(o *unstructured.Unstructured) phases.Phase {
	p, skip, err := phases.Of(o.GetAnnotations())
	if err != nil || skip {
		return phases.Main
	}
	return p
}
