package controller

import (
	"slices"
	"strings"
	"testing"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// A tenant can write the status of its own KCLArtifact (cluster-admin in its namespace, as in
// fluxcd/flux2-multi-tenancy). Here tenant A points status.artifact and a history entry at tenant
// B's artifact, whose program read a value B keeps secret. Before the fix the controller found
// the file in storage with the digest status claimed, took the forged artifact as up to date and
// published it in A's ExternalArtifact, for kustomize-controller to apply in A's namespace.
func TestForgedStatusNeverPublishesAnotherNamespacesArtifact(t *testing.T) {
	b := newFixture(t)
	b.commit("v1", map[string]string{"main.k": strings.Replace(program, `or "dev"`, `or "secret-of-b"`, 1)})
	theirs := b.waitReady(b.create("app", nil)).Status.Artifact.DeepCopy()

	f := newFixture(t)
	f.commit("v1", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	own := obj.Status.Artifact.DeepCopy()
	f.g.Expect(own.Digest).NotTo(Equal(theirs.Digest))

	f.g.Eventually(func() error {
		if err := k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		obj.Status.Artifact = theirs.DeepCopy()
		obj.Status.History = append([]kclv1.ArtifactHistoryEntry{{Digest: theirs.Digest, Revision: theirs.Revision,
			URL: theirs.URL, Size: theirs.Size, LastPublished: theirs.LastUpdateTime, Health: kclv1.HealthHealthy}}, obj.Status.History...)
		return k8sClient.Status().Update(f.ctx, obj)
	}, timeout, interval).Should(Succeed())
	f.requestReconcile(obj)

	ea := &sourcev1.ExternalArtifact{}
	ea.Name, ea.Namespace = "app", f.ns
	f.get(ea)
	f.g.Expect(ea.Status.Artifact).NotTo(BeNil())
	f.g.Expect(ea.Status.Artifact.Digest).To(Equal(own.Digest), "A's ExternalArtifact serves A's own artifact")
	f.g.Expect(ea.Status.Artifact.Path).To(Equal(own.Path))
	f.g.Expect(obj.Status.Artifact.Path).To(Equal(own.Path), "status.artifact is the controller's again")
	f.g.Expect(slices.ContainsFunc(obj.Status.History, func(e kclv1.ArtifactHistoryEntry) bool { return e.Digest == theirs.Digest })).
		To(BeFalse(), "the forged history entry is gone")
	f.g.Eventually(func(g Gomega) {
		var msg string
		for _, e := range eventsReceiver.of(obj) {
			if e.Reason == kclv1.StatusRepairedReason {
				msg = e.Message
			}
		}
		g.Expect(msg).To(And(ContainSubstring("status.artifact named"), ContainSubstring(theirs.Path),
			ContainSubstring("status.history entry "+theirs.Digest)))
	}, timeout, interval).Should(Succeed())

	// a pin to the forged digest finds nothing to publish
	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.PinnedDigest = theirs.Digest })
	obj = f.waitFor(obj, "False", kclv1.PinnedArtifactNotFoundReason)
	f.g.Expect(externalArtifactDigest(f, "app")).To(Equal(own.Digest))
}
