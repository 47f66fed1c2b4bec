package managedfields

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The handover gives the apply manager what others own of the spec, labels and owner references,
// renames an earlier release's update entry, and leaves everything else as it was: other
// metadata, subresources, kustomize-controller's finalizer.
func TestDriftHandOverOfManagedFields(t *testing.T) {
	g := NewWithT(t)
	entry := func(manager string, op metav1.ManagedFieldsOperationType, sub, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, Subresource: sub, APIVersion: "v1",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	const self = "kcl-artifact-controller"
	apply, update := metav1.ManagedFieldsOperationApply, metav1.ManagedFieldsOperationUpdate
	mine := entry(self, apply, "", `{"f:metadata":{"f:labels":{"f:kcl.contrib.fluxcd.io/name":{}},"f:ownerReferences":{"k:{\"uid\":\"o\"}":{}}},"f:spec":{"f:path":{},"f:prune":{}}}`)
	status := entry("kustomize-controller", update, "status", `{"f:status":{"f:conditions":{}}}`)
	finalizer := entry("kustomize-controller", update, "", `{"f:metadata":{"f:finalizers":{"v:\"finalizers.fluxcd.io\"":{}}}}`)
	requests := entry(self, update, "", `{"f:metadata":{"f:annotations":{"f:reconcile.fluxcd.io/requestedAt":{}}}}`)

	h, err := HandOver([]metav1.ManagedFieldsEntry{mine, status, finalizer, requests}, self, "v1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.Entries).To(BeNil(), "nothing to hand over")
	g.Expect(h.Report.Empty()).To(BeTrue())

	mallory := entry("mallory", update, "", `{"f:metadata":{"f:annotations":{"f:note":{}},"f:labels":{"f:sharding.fluxcd.io/key":{}}},"f:spec":{"f:patches":{},"f:path":{}}}`)
	owner := entry("kubectl-patch", update, "", `{"f:metadata":{"f:ownerReferences":{"k:{\"uid\":\"x\"}":{}}}}`)
	h, err = HandOver([]metav1.ManagedFieldsEntry{mine, status, mallory, finalizer, owner}, self, "v1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.Report.Paths).To(Equal([]string{"metadata.labels.sharding.fluxcd.io/key", "metadata.ownerReferences", "spec.patches", "spec.path"}))
	g.Expect(h.Report.Managers).To(Equal([]string{"kubectl-patch", "mallory"}))
	g.Expect(h.Entries).To(HaveLen(4), "kubectl-patch's entry owns nothing more")
	g.Expect(h.Entries[0].Manager).To(Equal(self))
	g.Expect(h.Entries[0].FieldsV1.Raw).To(MatchJSON(`{"f:metadata":{"f:labels":{"f:kcl.contrib.fluxcd.io/name":{},"f:sharding.fluxcd.io/key":{}},
		"f:ownerReferences":{"k:{\"uid\":\"o\"}":{},"k:{\"uid\":\"x\"}":{}}},"f:spec":{"f:path":{},"f:prune":{},"f:patches":{}}}`))
	g.Expect(h.Entries[1]).To(Equal(status))
	g.Expect(h.Entries[2].Manager).To(Equal("mallory"))
	g.Expect(h.Entries[2].FieldsV1.Raw).To(MatchJSON(`{"f:metadata":{"f:annotations":{"f:note":{}}}}`))
	g.Expect(h.Entries[3]).To(Equal(finalizer))

	// an earlier release's object: the update entry of the controller's manager becomes its
	// apply entry, and is told apart from a drift
	legacy := entry(self, update, "", `{"f:spec":{"f:path":{},"f:timeout":{}}}`)
	h, err = HandOver([]metav1.ManagedFieldsEntry{legacy, status}, self, "v1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.Report.Empty()).To(BeTrue())
	g.Expect(h.Entries).To(HaveLen(2))
	g.Expect(h.Entries[0].Operation).To(Equal(apply))
	g.Expect(h.Entries[0].FieldsV1.Raw).To(MatchJSON(legacy.FieldsV1.Raw))

	// nobody else writes the ExternalArtifact's status
	g.Expect(StatusDrift([]metav1.ManagedFieldsEntry{entry(self, update, "status", `{"f:status":{"f:artifact":{}}}`),
		entry("mallory", update, "status", `{"f:status":{"f:artifact":{"f:url":{}}}}`)}, self)).
		To(Equal(Drift{Paths: []string{"status.artifact"}, Managers: []string{"mallory"}}))
}
