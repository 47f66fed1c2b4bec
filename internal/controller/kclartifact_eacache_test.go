package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/source"
)

// An ExternalArtifact is held in the controller's cache as its metadata only, whether generated
// (published, its status written, deleted with its KCLArtifact) or read as a source (another
// producer's, whose new artifact reaches the KCLArtifact that renders it): no informer of whole
// ExternalArtifacts is ever started, and the metadata informer holds no spec or status.
func TestExternalArtifactsAreCachedAsMetadataOnly(t *testing.T) {
	f := newFixture(t)
	produced := &sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "produced", Namespace: f.ns},
		Spec: sourcev1.ExternalArtifactSpec{SourceRef: &meta.NamespacedObjectKindReference{
			APIVersion: "example.com/v1", Kind: "Producer", Name: "p"}}}
	f.g.Expect(k8sClient.Create(f.ctx, produced)).To(Succeed())
	f.produce(produced, "aaa", program)
	obj := f.create("app", func(s *kclv1.KCLArtifactSpec) {
		s.SourceRef = kclv1.SourceReference{Kind: sourcev1.ExternalArtifactKind, Name: produced.Name}
	})
	obj = f.waitReady(f.waitRevision(obj, "aaa"))

	// the producer's next artifact: the metadata watch queues the KCLArtifact reading it
	f.produce(produced, "bbb", `[{apiVersion = "v1", kind = "ConfigMap", metadata.name = "next"}]`)
	obj = f.waitReady(f.waitRevision(obj, "bbb"))
	f.g.Expect(obj.Status.Inventory).To(Equal([]kclv1.ObjectReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "next"}}))
	f.g.Expect(obj.Status.Artifact.Metadata).To(HaveKeyWithValue(source.OriginKey, "https://example.com/composed.git"),
		"the artifact's origin is the ExternalArtifact's own")
	generated := &sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(generated), generated)).To(Succeed())
		g.Expect(generated.Status.Artifact).To(Equal(obj.Status.Artifact))
		g.Expect(conditions.IsReady(generated)).To(BeTrue())
	}, timeout, interval).Should(Succeed())
	expectExternalArtifactsAsMetadata(f, generated, produced)

	// deleted: the finalizer deletes the generated ExternalArtifact
	f.g.Expect(k8sClient.Delete(f.ctx, obj)).To(Succeed())
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(generated), generated))
	}, timeout, interval).Should(BeTrue())
	expectExternalArtifactsAsMetadata(f)
}

// produce gives the producer's ExternalArtifact an artifact of program, as its producer would.
func (f *fixture) produce(ea *sourcev1.ExternalArtifact, rev, program string) {
	url, digest := serveSource(f.g, map[string]string{"main.k": program})
	f.g.Eventually(func() error {
		if err := k8sClient.Get(f.ctx, client.ObjectKeyFromObject(ea), ea); err != nil {
			return err
		}
		ea.Status.Artifact = &meta.Artifact{Path: "x", URL: url, Digest: digest, Revision: "main@sha1:" + rev,
			LastUpdateTime: metav1.Now(), Metadata: map[string]string{source.OriginKey: "https://example.com/composed.git"}}
		return k8sClient.Status().Update(f.ctx, ea)
	}, timeout, interval).Should(Succeed())
}

// expectExternalArtifactsAsMetadata checks that no informer of whole ExternalArtifacts was ever
// asked for, and that the metadata informer the controller watches holds metadata only, these
// ExternalArtifacts among them.
func expectExternalArtifactsAsMetadata(f *fixture, present ...*sourcev1.ExternalArtifact) {
	f.t.Helper()
	kind := sourcev1.ExternalArtifactKind
	f.g.Expect(cacheUse.has("typed", kind)).To(BeFalse(), "the cache started an informer of whole ExternalArtifacts")
	f.g.Expect(cacheUse.has("unstructured", kind)).To(BeFalse(), "the cache started an informer of unstructured ExternalArtifacts")
	f.g.Expect(cacheUse.has("metadata", kind)).To(BeTrue(), "the controller does not watch ExternalArtifacts' metadata")
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(sourcev1.GroupVersion.WithKind(kind))
	inf, err := testCache.GetInformer(f.ctx, m)
	f.g.Expect(err).NotTo(HaveOccurred())
	store := inf.(toolscache.SharedIndexInformer).GetStore()
	f.g.Eventually(func(g Gomega) {
		keys := map[string]bool{}
		for _, o := range store.List() {
			p, ok := o.(*metav1.PartialObjectMetadata)
			g.Expect(ok).To(BeTrue(), "the metadata informer holds a %T", o)
			g.Expect(p.ManagedFields).To(BeNil())
			keys[p.Namespace+"/"+p.Name] = true
		}
		for _, ea := range present {
			g.Expect(keys).To(HaveKey(ea.Namespace + "/" + ea.Name))
		}
	}, 10*time.Second, interval).Should(Succeed())
}

// The cache holds no ExternalArtifact status to compare with: a status someone else changed
// (its resourceVersion is not the one of the controller's last write) is read from the API
// server and repaired by the next reconcile, though the artifact did not change.
func TestExternalArtifactStatusChangedBySomeoneElseIsRepaired(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	ea := &sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(ea), ea)).To(Succeed())
		g.Expect(ea.Status.Artifact).To(Equal(obj.Status.Artifact))
		ea.Status.Artifact.Metadata["stale"] = "someone else's"
		conditions.MarkFalse(ea, meta.ReadyCondition, "Edited", "by hand")
		g.Expect(k8sClient.Status().Update(f.ctx, ea)).To(Succeed())
	}, timeout, interval).Should(Succeed())

	f.requestReconcile(obj)
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(ea), ea)).To(Succeed())
		g.Expect(ea.Status.Artifact).To(Equal(obj.Status.Artifact))
		g.Expect(conditions.IsReady(ea)).To(BeTrue())
	}, timeout, interval).Should(Succeed())
}

// The status of a generated ExternalArtifact is compared with what the controller wrote, not read
// back: neither the first publish, nor a new artifact, nor a no-op reads it from the API server.
func TestGeneratedExternalArtifactIsNotReadBack(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	key := "*v1.ExternalArtifact " + f.ns + "/app"
	statusKey := key + " status"
	created := writes.in(f.ns)[statusKey]
	f.g.Expect(created).To(Equal(1), "the first artifact, written once")

	f.commit("bbb", map[string]string{"main.k": strings.Replace(program, `"dev"`, `"staging"`, 1)})
	obj = f.waitReady(f.waitRevision(obj, "bbb"))
	f.requestReconcile(obj)
	f.g.Expect(writes.in(f.ns)[statusKey]).To(Equal(created+1), "one status write for the new artifact, none for the no-op")
	f.g.Expect(apiReads.in(f.ns)[key]).To(BeZero(), "the ExternalArtifact was read from the API server")
	ea := &sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}
	f.g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(ea), ea)).To(Succeed())
	f.g.Expect(ea.Status.Artifact).To(Equal(obj.Status.Artifact))
}
