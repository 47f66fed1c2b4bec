package controller

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
)

// storedFiles lists the files of obj's artifact directory.
func storedFiles(g Gomega, obj *kclv1.KCLArtifact) []string {
	entries, err := os.ReadDir(testStorage.LocalPath(meta.Artifact{Path: artifactstore.Dir(obj)}))
	g.Expect(err).NotTo(HaveOccurred())
	var names []string
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".") { // the store's record of the directory
			names = append(names, e.Name())
		}
	}
	return names
}

func renderEnv(f *fixture, obj *kclv1.KCLArtifact, env string) *kclv1.KCLArtifact {
	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Arguments = map[string]string{"env": env} })
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
		g.Expect(conditions.IsReady(obj)).To(BeTrue())
	}, timeout, interval).Should(Succeed())
	return obj
}

// The last historyLimit distinct artifacts are listed newest first and kept in storage, and
// nothing else is; publishing an earlier output again moves it up instead of adding it twice.
func TestHistoryKeepsTheLastDistinctArtifacts(t *testing.T) {
	f := newFixture(t)
	f.commit("one", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) { s.HistoryLimit = ptr.To(2) }))
	dev := obj.Status.Artifact.DeepCopy()
	f.g.Expect(obj.Status.History).To(HaveLen(1))
	staging := renderEnv(f, obj, "staging").Status.Artifact.DeepCopy()
	prod := renderEnv(f, obj, "prod").Status.Artifact.DeepCopy()

	digests := func(h []kclv1.ArtifactHistoryEntry) []string {
		var d []string
		for _, e := range h {
			d = append(d, e.Digest)
		}
		return d
	}
	f.g.Expect(digests(obj.Status.History)).To(Equal([]string{prod.Digest, staging.Digest}))
	e := obj.Status.History[0]
	f.g.Expect([]any{e.Revision, e.SourceRevision, e.URL, e.Objects}).To(Equal([]any{prod.Revision, "main@sha1:one", prod.URL, 1}))
	f.g.Eventually(func(g Gomega) {
		files := storedFiles(g, obj)
		slices.Sort(files)
		want := []string{artifactstore.FileName(prod.URL), artifactstore.FileName(staging.URL), artifactstore.LatestName}
		slices.Sort(want)
		g.Expect(files).To(Equal(want), "the first artifact %s is collected, the two kept stay", artifactstore.FileName(dev.URL))
	}, timeout, interval).Should(Succeed())
	// The artifact server's diff compares the two that status.history lists.
	code, body := fetch(f.g, fmt.Sprintf("%s/kclartifact/%s/app/diff?token=%s", artifactURL, f.ns, testStorage.Token(f.ns, "app", obj.UID)))
	f.g.Expect(code).To(Equal(http.StatusOK), body)
	f.g.Expect(body).To(HavePrefix(fmt.Sprintf("# %s/app: %s (main@sha1:one) -> %s (main@sha1:one)", f.ns, staging.Revision, prod.Revision)))

	renderEnv(f, obj, "staging")
	f.g.Expect(digests(obj.Status.History)).To(Equal([]string{staging.Digest, prod.Digest}))
}

// retentionTTL is the suite's --artifact-retention-ttl: long enough for a test to see an old
// artifact still served, short enough to see it go.
const retentionTTL = 5 * time.Second

// An artifact that leaves the history is served for the retention TTL after it left: a
// kustomize-controller that read its URL a moment before still downloads it. Then the
// controller comes back (it requeues for that moment) and removes it.
func TestOldArtifactIsServedForTheRetentionTTL(t *testing.T) {
	f := newFixture(t)
	f.commit("one", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) { s.HistoryLimit = ptr.To(1) }))
	old := obj.Status.Artifact.DeepCopy()
	obj = renderEnv(f, obj, "staging")
	f.g.Expect(obj.Status.History).To(HaveLen(1))
	left := time.Now()
	code, _ := fetch(f.g, old.URL)
	f.g.Expect(code).To(Equal(http.StatusOK), "the previous artifact right after the new one was published")
	f.g.Eventually(func() int { c, _ := fetch(f.g, old.URL); return c }, timeout, interval).Should(Equal(http.StatusNotFound))
	f.g.Expect(time.Since(left)).To(BeNumerically(">=", retentionTTL-time.Second), "removed before the TTL")
}

// Pinning publishes a kept artifact again and says so; an unknown digest stalls naming the kept
// ones; removing the pin renders the current inputs again.
func TestPinningAKeptArtifact(t *testing.T) {
	f := newFixture(t)
	f.commit("one", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	v1 := obj.Status.Artifact.DeepCopy()
	f.commit("two", map[string]string{"main.k": strings.Replace(program, `"app-${_env}"`, `"app-${_env}-two"`, 1)})
	obj = f.waitRevision(obj, "two")
	obj = f.waitReady(obj)
	v2, v2Objects := obj.Status.Artifact.DeepCopy(), obj.Status.InventoryCount
	f.g.Expect(v2.Digest).NotTo(Equal(v1.Digest))

	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.PinnedDigest = v1.Digest })
	// The reason, for the generation just written.
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(conditions.GetReason(obj, meta.ReadyCondition)).To(Equal(kclv1.PinnedReason))
		g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
	}, timeout, interval).Should(Succeed())
	sameArtifact(f.g, obj.Status.Artifact, v1)
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(ContainSubstring("main@sha1:one"))
	f.g.Expect(obj.Status.SourceRevision).To(Equal("main@sha1:one"))
	f.g.Expect(obj.Status.InventoryCount).To(Equal(1))
	ea := &sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(ea), ea)).To(Succeed())
		g.Expect(ea.Status.Artifact).NotTo(BeNil())
		g.Expect(ea.Status.Artifact.Digest).To(Equal(v1.Digest))
	}, timeout, interval).Should(Succeed())
	latest, err := os.Readlink(filepath.Join(filepath.Dir(testStorage.LocalPath(*v1)), artifactstore.LatestName))
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(filepath.Base(latest)).To(Equal(artifactstore.FileName(v1.URL)))

	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.PinnedDigest = "sha256:0123" })
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(conditions.GetReason(obj, meta.ReadyCondition)).To(Equal(kclv1.PinnedArtifactNotFoundReason))
		g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
	}, timeout, interval).Should(Succeed())
	f.g.Expect(conditions.IsStalled(obj)).To(BeTrue())
	msg := conditions.GetMessage(obj, meta.ReadyCondition)
	f.g.Expect(msg).To(ContainSubstring(v1.Digest))
	f.g.Expect(msg).To(ContainSubstring(v2.Digest))
	sameArtifact(f.g, obj.Status.Artifact, v1)

	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.PinnedDigest = "" })
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(conditions.IsReady(obj)).To(BeTrue())
		g.Expect(conditions.GetReason(obj, meta.ReadyCondition)).NotTo(Equal(kclv1.PinnedReason))
		g.Expect(obj.Status.Artifact.Digest).To(Equal(v2.Digest))
	}, timeout, interval).Should(Succeed())
	f.g.Expect(obj.Status.InventoryCount).To(Equal(v2Objects))
}
