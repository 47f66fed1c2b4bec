package controller

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact"
	"github.com/kcl-flux/kcl-artifact-controller/internal/provenance"
)

// pushSecrets creates the registry credentials and a cosign key pair in the namespace and
// returns the public key.
func (f *fixture) pushSecrets(reg *kclmodtest.Registry) []byte {
	priv, pub, err := ociartifact.GenerateKeyPair([]byte("key-pw"))
	f.g.Expect(err).NotTo(HaveOccurred())
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: f.ns}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: reg.DockerConfigJSON()}},
		{ObjectMeta: metav1.ObjectMeta{Name: "cosign", Namespace: f.ns},
			Data: map[string][]byte{"cosign.key": priv, "cosign.pub": pub, "cosign.password": []byte("key-pw")}},
	} {
		f.g.Expect(k8sClient.Create(f.ctx, s)).To(Succeed())
	}
	return pub
}

func publishTo(reg *kclmodtest.Registry, tag string, sign bool) func(*kclv1.KCLArtifactSpec) {
	return func(s *kclv1.KCLArtifactSpec) {
		s.Arguments = map[string]string{"env": "prod"}
		s.Publish = &kclv1.Publish{OCI: &kclv1.OCIPublish{URL: "oci://" + reg.Host + "/fleet/app", Tag: tag, Insecure: true,
			SecretRef: &kclv1.LocalObjectReference{Name: "regcred"}}}
		if sign {
			s.Publish.OCI.Sign = &kclv1.OCISign{SecretRef: kclv1.LocalObjectReference{Name: "cosign"}}
		}
	}
}

// waitPushed waits until the current artifact is recorded as pushed, and returns the record.
func (f *fixture) waitPushed(obj *kclv1.KCLArtifact) *kclv1.OCIRecord {
	f.t.Helper()
	var rec *kclv1.OCIRecord
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.Artifact).NotTo(BeNil())
		g.Expect(obj.Status.History).NotTo(BeEmpty())
		g.Expect(obj.Status.History[0].Digest).To(Equal(obj.Status.Artifact.Digest))
		rec = obj.Status.History[0].OCI
		g.Expect(rec).NotTo(BeNil(), "PushFailed: %s", conditions.GetMessage(obj, kclv1.PushFailedCondition))
		g.Expect(conditions.Has(obj, kclv1.PushFailedCondition)).To(BeFalse())
	}, timeout, interval).Should(Succeed())
	return rec
}

// Each published artifact is pushed, signed, with provenance a verifier accepts; the layer is
// the stored artifact; the moving tag follows what is published, and the same output is the
// same OCI digest.
func TestPublishOCIPushesSignedArtifacts(t *testing.T) {
	f := newFixture(t)
	reg := kclmodtest.StartRegistry(t, "robot", "s3cret-pw")
	pub := f.pushSecrets(reg)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", publishTo(reg, "production", true)))
	rec := f.waitPushed(obj)
	f.g.Expect(rec.Signed).To(BeTrue())
	f.g.Expect(rec.Tag).To(Equal("production"))

	repo, err := name.NewRepository(reg.Host+"/fleet/app", name.Insecure)
	f.g.Expect(err).NotTo(HaveOccurred())
	opts := []remote.Option{remote.WithAuth(reg.Auth())}
	v, err := ociartifact.LoadVerifier(pub)
	f.g.Expect(err).NotTo(HaveOccurred())
	verified, err := ociartifact.Verify(repo.Digest(rec.Digest), v, opts...)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(string(verified.Statement)).To(ContainSubstring(`"revision":"main@sha1:aaa"`))
	f.g.Expect(string(verified.Statement)).To(ContainSubstring(`"env":"prod"`))

	img, err := remote.Image(repo.Digest(rec.Digest), opts...)
	f.g.Expect(err).NotTo(HaveOccurred())
	layers, err := img.Layers()
	f.g.Expect(err).NotTo(HaveOccurred())
	d, _ := layers[0].Digest()
	f.g.Expect(d.String()).To(Equal(obj.Status.Artifact.Digest), "the layer is the stored artifact")
	f.g.Expect(tagDigest(f, repo, "production", opts)).To(Equal(rec.Digest))

	// a new output moves the tag
	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Arguments = map[string]string{"env": "staging"} })
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.History).To(HaveLen(2))
		g.Expect(obj.Status.History[0].OCI).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	second := *obj.Status.History[0].OCI
	f.g.Expect(second.Digest).NotTo(Equal(rec.Digest))
	f.g.Expect(tagDigest(f, repo, "production", opts)).To(Equal(second.Digest))

	// the first output again (a new commit, the same render): the first OCI digest, tagged again
	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Arguments = map[string]string{"env": "prod"} })
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.History[0].OCI).NotTo(BeNil())
		g.Expect(obj.Status.History[0].OCI.Digest).To(Equal(rec.Digest))
	}, timeout, interval).Should(Succeed())
	f.g.Expect(tagDigest(f, repo, "production", opts)).To(Equal(rec.Digest))

	// a pin is published, so it is what the tag names
	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.PinnedDigest = obj.Status.History[1].Digest })
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		e := servedEntry(obj)
		g.Expect(e).NotTo(BeNil())
		g.Expect(e.OCI).NotTo(BeNil())
		g.Expect(e.OCI.Digest).To(Equal(second.Digest), "served %s, pinned %s; Ready: %s; PushFailed: %s",
			obj.Status.Artifact.Digest, obj.Spec.PinnedDigest, conditions.GetMessage(obj, meta.ReadyCondition),
			conditions.GetMessage(obj, kclv1.PushFailedCondition))
		g.Expect(e.OCI.Tag).To(Equal("production"))
	}, timeout, interval).Should(Succeed())
	f.g.Expect(tagDigest(f, repo, "production", opts)).To(Equal(second.Digest))
}

func tagDigest(f *fixture, repo name.Repository, tag string, opts []remote.Option) string {
	desc, err := remote.Head(repo.Tag(tag), opts...)
	f.g.Expect(err).NotTo(HaveOccurred())
	return desc.Digest.String()
}

// A registry that refuses the push: PushFailed says why, the artifact is published in the
// cluster all the same, and the push is tried again until it succeeds.
func TestPushFailureKeepsTheArtifactPublishedAndRetries(t *testing.T) {
	f := newFixture(t)
	reg := kclmodtest.StartRegistry(t, "robot", "s3cret-pw")
	f.pushSecrets(reg)
	reg.Password = "rotated"
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.create("app", publishTo(reg, "", false))
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		c := conditions.Get(obj, kclv1.PushFailedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(kclv1.PushFailedReason))
		g.Expect(c.Message).To(ContainSubstring("refused the credentials"))
		g.Expect(c.Message).NotTo(ContainSubstring("s3cret-pw"))
	}, timeout, interval).Should(Succeed())
	f.g.Expect(conditions.IsReady(obj)).To(BeTrue(), "the artifact is published: %s", conditions.GetMessage(obj, meta.ReadyCondition))
	f.g.Expect(obj.Status.ExternalArtifactRef).NotTo(BeNil())
	f.g.Expect(obj.Status.History[0].OCI).To(BeNil())

	reg.Password = "s3cret-pw" // the registry takes the Secret's password again
	rec := f.waitPushed(obj)
	f.g.Expect(rec.Tag).To(Equal("latest"))
	f.g.Expect(rec.Signed).To(BeFalse())
}

// Attack: a tenant names the registry Secret of another namespace. Secrets are read from the
// KCLArtifact's own namespace only, so the push goes without credentials and is refused.
func TestPushNeverUsesAnotherNamespacesCredentials(t *testing.T) {
	victim := newFixture(t)
	reg := kclmodtest.StartRegistry(t, "robot", "s3cret-pw")
	victim.pushSecrets(reg)
	attacker := newFixture(t)
	attacker.commit("aaa", map[string]string{"main.k": program})
	obj := attacker.create("app", publishTo(reg, "", false))
	attacker.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(attacker.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		c := conditions.Get(obj, kclv1.PushFailedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Message).To(ContainSubstring(attacker.ns + "/regcred"))
		g.Expect(c.Message).To(ContainSubstring("not found"))
	}, timeout, interval).Should(Succeed())
	attacker.g.Expect(reg.Conns()).To(BeZero(), "nothing was sent to the registry")
}

// What is rendered from a Secret is not copied out of the cluster, where the namespace's access
// control no longer holds.
func TestPushOfSecretDerivedArtifactIsRefused(t *testing.T) {
	f := newFixture(t)
	reg := kclmodtest.StartRegistry(t, "robot", "s3cret-pw")
	f.pushSecrets(reg)
	f.g.Expect(k8sClient.Create(f.ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: f.ns},
		Data: map[string][]byte{"env": []byte("secret-env")}})).To(Succeed())
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) {
		publishTo(reg, "", false)(s)
		s.Arguments = nil
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "Secret", Name: "db"}}
	}))
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		msg := conditions.GetMessage(obj, kclv1.PushFailedCondition)
		g.Expect(msg).To(ContainSubstring("reads Secret inputs"))
		g.Expect(strings.Contains(msg, "secret-env")).To(BeFalse())
	}, timeout, interval).Should(Succeed())
	f.g.Expect(reg.Conns()).To(BeZero())
}

// A storage volume lost (the files gone): the artifacts that were pushed are fetched back from
// the registry, checked against the digests history recorded, and served again; a pin to an
// entry that exists only in the registry works.
func TestArtifactsOnlyInTheRegistryAreFetchedBack(t *testing.T) {
	f := newFixture(t)
	reg := kclmodtest.StartRegistry(t, "robot", "s3cret-pw")
	f.pushSecrets(reg)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", publishTo(reg, "", true)))
	f.waitPushed(obj)
	first := obj.Status.Artifact.DeepCopy()
	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.Arguments = map[string]string{"env": "staging"} })
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.History).To(HaveLen(2))
		g.Expect(obj.Status.History[0].OCI).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	second := obj.Status.Artifact.DeepCopy()
	for _, a := range []*meta.Artifact{first, second} {
		f.g.Expect(os.Remove(testStorage.LocalPath(*a))).To(Succeed())
	}

	f.update(obj, func(s *kclv1.KCLArtifactSpec) { s.PinnedDigest = first.Digest })
	obj = f.waitFor(obj, metav1.ConditionTrue, kclv1.PinnedReason)
	f.g.Expect(obj.Status.Artifact.Digest).To(Equal(first.Digest))
	f.g.Expect(testStorage.Holds(obj, obj.Status.Artifact)).To(BeTrue(), "the pinned artifact is in storage with its digest")
	_, body := fetch(f.g, obj.Status.Artifact.URL)
	f.g.Expect(body).NotTo(BeEmpty())
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		for _, e := range obj.Status.History {
			g.Expect(e.Missing).To(BeFalse(), "%s missing", e.Digest)
		}
	}, timeout, interval).Should(Succeed())
	f.g.Expect(testStorage.Keeps(obj, obj.Status.History[1])).To(BeTrue(), "the other entry was fetched back too")
	f.g.Expect(f.eventText()).To(ContainSubstring("fetched back from"))
}

// Attack: a tenant who may write the status forges a history entry naming another artifact's
// push (another KCLArtifact's of the namespace, signed with the same key). After a lost volume
// the genuine entry is fetched back; the forged one is refused, because the signed provenance
// names another object's push, and nothing is written for it.
func TestForgedHistoryEntryIsNotFetchedBack(t *testing.T) {
	f := newFixture(t)
	reg := kclmodtest.StartRegistry(t, "robot", "s3cret-pw")
	f.pushSecrets(reg)
	f.commit("aaa", map[string]string{"main.k": program})
	other := f.waitReady(f.create("other", func(s *kclv1.KCLArtifactSpec) {
		publishTo(reg, "other", true)(s)
		s.Arguments = map[string]string{"env": "other"}
	}))
	theirs := *f.waitPushed(other)
	obj := f.waitReady(f.create("app", publishTo(reg, "", true)))
	f.waitPushed(obj)
	forged := other.Status.History[0]
	f.g.Eventually(func() error {
		if err := k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		e := forged
		e.OCI = &theirs
		e.URL = artifactstore.FileName(forged.URL)
		obj.Status.History = append(obj.Status.History, e)
		return k8sClient.Status().Update(f.ctx, obj)
	}, timeout, interval).Should(Succeed())
	// the volume lost: the artifact and the ledger that would refuse the forged entry
	local := testStorage.LocalPath(*obj.Status.Artifact)
	f.g.Expect(os.Remove(local)).To(Succeed())
	f.g.Expect(os.Remove(filepath.Join(filepath.Dir(local), ".history.json"))).To(Succeed())
	f.requestReconcile(obj)
	f.g.Eventually(f.eventText, timeout, interval).Should(ContainSubstring("names another push"))
	f.g.Expect(f.eventText()).To(ContainSubstring("fetched back from"))
	f.g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	f.g.Expect(testStorage.Holds(obj, obj.Status.Artifact)).To(BeTrue(), "the genuine artifact is back")
	forgedHere := forged
	forgedHere.URL = artifactstore.FileName(forged.URL)
	_, err := os.Stat(testStorage.LocalPath(testStorage.ArtifactOf(obj, forgedHere)))
	f.g.Expect(os.IsNotExist(err)).To(BeTrue(), "nothing was written for the forged entry: %v", err)
}

// The provenance names the kcl.mod dependencies the render resolved, with their sums.
func TestPushedProvenanceNamesTheDependencies(t *testing.T) {
	f := newFixture(t)
	reg := kclmodtest.StartRegistry(t, "robot", "s3cret-pw")
	pub := f.pushSecrets(reg)
	f.commit("aaa", map[string]string{"kcl.mod": appMod(pushK8s(t, reg)), "main.k": k8sProgram})
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) {
		publishTo(reg, "", true)(s)
		s.RegistrySecretRef = &kclv1.LocalObjectReference{Name: "regcred"}
	}))
	rec := f.waitPushed(obj)
	repo, err := name.NewRepository(reg.Host+"/fleet/app", name.Insecure)
	f.g.Expect(err).NotTo(HaveOccurred())
	v, err := ociartifact.LoadVerifier(pub)
	f.g.Expect(err).NotTo(HaveOccurred())
	verified, err := ociartifact.Verify(repo.Digest(rec.Digest), v, remote.WithAuth(reg.Auth()))
	f.g.Expect(err).NotTo(HaveOccurred())
	b, err := provenance.Read(verified.Statement)
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(b.DependenciesRecorded).To(BeTrue())
	f.g.Expect(b.SourceKind).To(Equal("GitRepository"), "the source as the render read it")
	f.g.Expect(b.SourceDigest).To(HavePrefix("sha256:"))
	f.g.Expect(b.SourceRevision).To(Equal("main@sha1:aaa"))
	f.g.Expect(b.Dependencies).To(ContainElement(And(
		HaveField("Name", "k8s"), HaveField("Version", "1.31.2"), HaveField("Sum", Not(BeEmpty())),
		HaveField("Source", ContainSubstring("/kcl-lang/k8s")))))
}
