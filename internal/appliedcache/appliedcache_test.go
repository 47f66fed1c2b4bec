package appliedcache

import (
	"crypto/sha256"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The status known of an object holds at the resourceVersion of the write or read that taught
// it, and at the one before (a cache behind that write); any other means someone else wrote it.
func TestKnownStatusHoldsAtOwnResourceVersionsOnly(t *testing.T) {
	g := NewWithT(t)
	var a Cache
	ea := &metav1.PartialObjectMetadata{}
	ea.UID, ea.Generation = "uid-1", 1
	a.SawStatus(ea.UID, "5", "4", nil, sha256.Sum256([]byte("s")))
	_, ok := a.StatusAt(ea.UID, "5")
	g.Expect(ok).To(BeFalse(), "remembered for an object never applied")

	a.Record(ea, "config")
	a.SawStatus(ea.UID, "5", "4", []metav1.Condition{{Type: meta.ReadyCondition}}, sha256.Sum256([]byte("s")))
	for rv, want := range map[string]bool{"5": true, "4": true, "6": false, "": false} {
		s, ok := a.StatusAt(ea.UID, rv)
		g.Expect(ok).To(Equal(want), "at %q", rv)
		if ok {
			g.Expect(s.Digest).To(Equal(sha256.Sum256([]byte("s"))))
			g.Expect(s.Conditions).To(HaveLen(1))
		}
	}
	a.Record(ea, "config 2")
	_, ok = a.StatusAt(ea.UID, "5")
	g.Expect(ok).To(BeTrue(), "an apply keeps the status known")
	a.Forget(ea.UID)
	_, ok = a.StatusAt(ea.UID, "5")
	g.Expect(ok).To(BeFalse(), "forgotten with the object")
}
