package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/acl"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

const (
	timeout  = 60 * time.Second
	interval = 100 * time.Millisecond
)

var nsCounter atomic.Int64

// program renders one ConfigMap per environment.
const program = `_env = option("env") or "dev"
_replicas = option("replicas") or 1
[{
    apiVersion = "v1"
    kind = "ConfigMap"
    metadata = {name = "app-${_env}"}
    data = {env = _env, replicas = str(_replicas)}
}]
`

type fixture struct {
	t    *testing.T
	g    *WithT
	ctx  context.Context
	ns   string
	repo *sourcev1.GitRepository
}

func newFixture(t *testing.T) *fixture {
	g := NewWithT(t)
	f := &fixture{t: t, g: g, ctx: context.Background(), ns: fmt.Sprintf("kcl-test-%d", nsCounter.Add(1))}
	g.Expect(k8sClient.Create(f.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}})).To(Succeed())
	f.repo = &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "repo", Namespace: f.ns},
		Spec:       sourcev1.GitRepositorySpec{URL: "https://example.invalid/repo.git", Interval: metav1.Duration{Duration: time.Hour}},
	}
	g.Expect(k8sClient.Create(f.ctx, f.repo)).To(Succeed())
	return f
}

// commit makes the simulated GitRepository point at a new tarball, as source-controller would.
func (f *fixture) commit(rev string, files map[string]string) {
	url, digest := serveSource(f.g, files)
	f.setArtifact(&meta.Artifact{Path: "x", URL: url, Digest: digest, Revision: "main@sha1:" + rev,
		LastUpdateTime: metav1.Now()})
}

func (f *fixture) setArtifact(a *meta.Artifact) {
	f.g.Eventually(func() error {
		if err := k8sClient.Get(f.ctx, client.ObjectKeyFromObject(f.repo), f.repo); err != nil {
			return err
		}
		f.repo.Status.Artifact = a
		return k8sClient.Status().Update(f.ctx, f.repo)
	}, timeout, interval).Should(Succeed())
}

func (f *fixture) create(name string, mutate func(*kclv1.KCLArtifactSpec)) *kclv1.KCLArtifact {
	obj := &kclv1.KCLArtifact{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: kclv1.KCLArtifactSpec{
			SourceRef: kclv1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: f.repo.Name},
			Interval:  metav1.Duration{Duration: time.Hour},
		},
	}
	if mutate != nil {
		mutate(&obj.Spec)
	}
	f.g.Expect(k8sClient.Create(f.ctx, obj)).To(Succeed())
	return obj
}

// update changes the KCLArtifact's spec, retrying on conflicts with the controller's writes.
func (f *fixture) update(obj *kclv1.KCLArtifact, mutate func(*kclv1.KCLArtifactSpec)) {
	f.t.Helper()
	f.g.Eventually(func() error {
		if err := k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate(&obj.Spec)
		return k8sClient.Update(f.ctx, obj)
	}, timeout, interval).Should(Succeed())
}

func (f *fixture) get(obj client.Object) client.Object {
	f.g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	return obj
}

// waitFor waits until the KCLArtifact's Ready condition has the given status and reason, and
// the reconciler has seen the current generation.
func (f *fixture) waitFor(obj *kclv1.KCLArtifact, status metav1.ConditionStatus, reason string) *kclv1.KCLArtifact {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		c := conditions.Get(obj, meta.ReadyCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(status), "Ready: %s %s", c.Reason, c.Message)
		g.Expect(c.Reason).To(Equal(reason), "Ready: %s", c.Message)
	}, timeout, interval).Should(Succeed())
	return obj
}

// waitReady waits until the KCLArtifact is Ready, whether it rendered or found its artifact up to date.
func (f *fixture) waitReady(obj *kclv1.KCLArtifact) *kclv1.KCLArtifact {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(conditions.IsReady(obj)).To(BeTrue(), "Ready: %s", conditions.GetMessage(obj, meta.ReadyCondition))
		g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
	}, timeout, interval).Should(Succeed())
	return obj
}

// waitRevision waits until the KCLArtifact was rendered from the given source revision.
func (f *fixture) waitRevision(obj *kclv1.KCLArtifact, rev string) *kclv1.KCLArtifact {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		// Status is written once per reconciliation, so the attempt is over when it shows.
		g.Expect(obj.Status.LastAttemptedRevision).To(Equal("main@sha1:" + rev))
	}, timeout, interval).Should(Succeed())
	return obj
}

func (f *fixture) requestReconcile(obj *kclv1.KCLArtifact) string {
	token := time.Now().Format(time.RFC3339Nano)
	f.g.Eventually(func() error {
		if err := k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		if obj.Annotations == nil {
			obj.Annotations = map[string]string{}
		}
		obj.Annotations[meta.ReconcileRequestAnnotation] = token
		return k8sClient.Update(f.ctx, obj)
	}, timeout, interval).Should(Succeed())
	f.g.Eventually(func() string {
		_ = k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)
		return obj.Status.LastHandledReconcileAt
	}, timeout, interval).Should(Equal(token))
	return token
}

func fetch(g Gomega, url string) (int, string) {
	resp, err := http.Get(url)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func latestYAML(obj *kclv1.KCLArtifact) string {
	// the artifact server answers only URLs that carry the object's token, as published ones do
	return fmt.Sprintf("%s/kclartifact/%s/%s/latest.yaml?token=%s", artifactURL, obj.Namespace, obj.Name, testStorage.Token(obj.Namespace, obj.Name, obj.UID))
}

func TestFirstRenderPublishesArtifactExternalArtifactAndKustomization(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"app/main.k": program})
	obj := f.create("app", func(s *kclv1.KCLArtifactSpec) {
		s.Path = "app"
		s.Arguments = map[string]string{"env": "prod", "replicas": "3"}
	})
	obj = f.waitReady(obj)
	g := f.g

	a := obj.Status.Artifact
	g.Expect(a).NotTo(BeNil())
	g.Expect(a.Revision).To(MatchRegexp(`^main@sha256:[0-9a-f]{64}$`))
	g.Expect(a.Revision).To(HaveSuffix(a.Digest))
	g.Expect(a.Metadata).To(HaveKeyWithValue("org.opencontainers.image.revision", "main@sha1:aaa"))
	g.Expect(obj.Status.SourceRevision).To(Equal("main@sha1:aaa"))
	g.Expect(obj.Status.ObservedGeneration).To(Equal(obj.Generation))
	g.Expect(obj.Status.Inventory).To(Equal([]kclv1.ObjectReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "app-prod"}}))
	g.Expect(testStorage.VerifyArtifact(*a)).To(Succeed())

	code, body := fetch(g, a.URL)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(len(body)).To(BeNumerically("==", *a.Size))
	code, body = fetch(g, latestYAML(obj))
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(body).To(ContainSubstring("name: app-prod"))
	g.Expect(body).To(ContainSubstring("replicas: \"3\""))

	ea := f.get(&sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}).(*sourcev1.ExternalArtifact)
	g.Expect(ea.Status.Artifact).To(Equal(a))
	g.Expect(ea.Spec.SourceRef.Kind).To(Equal(kclv1.KCLArtifactKind))
	g.Expect(metav1.IsControlledBy(ea, obj)).To(BeTrue())
	g.Expect(conditions.IsReady(ea)).To(BeTrue())

	ks := f.get(&kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}).(*kustomizev1.Kustomization)
	g.Expect(ks.Spec.SourceRef).To(Equal(kustomizev1.CrossNamespaceSourceReference{Kind: "ExternalArtifact", Name: "app", Namespace: f.ns}))
	g.Expect(ks.Spec.Prune).To(BeTrue())
	g.Expect(ks.Spec.Interval).To(Equal(obj.Spec.Interval))
	g.Expect(obj.Status.KustomizationRef.Name).To(Equal("app"))
	// No kustomize-controller runs here: the mirror condition waits for it.
	g.Expect(conditions.IsUnknown(obj, kclv1.KustomizationReadyCondition)).To(BeTrue())
}

func TestSourceRevisionChangePublishesNewArtifact(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	first := obj.Status.Artifact.DeepCopy()

	f.commit("bbb", map[string]string{"main.k": strings.Replace(program, `"dev"`, `"staging"`, 1)})
	obj = f.waitRevision(obj, "bbb")
	g := f.g
	g.Expect(conditions.IsReady(obj)).To(BeTrue())
	g.Expect(obj.Status.Artifact.Digest).NotTo(Equal(first.Digest))
	g.Expect(obj.Status.SourceRevision).To(Equal("main@sha1:bbb"))
	g.Expect(obj.Status.Inventory[0].Name).To(Equal("app-staging"))
	ea := f.get(&sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}).(*sourcev1.ExternalArtifact)
	g.Expect(ea.Status.Artifact.Revision).To(Equal(obj.Status.Artifact.Revision))
	_, body := fetch(g, latestYAML(obj))
	g.Expect(body).To(ContainSubstring("app-staging"))
}

// The ExternalArtifact's status is this controller's alone and is written whole: what another
// writer, or an older artifact, left in it is gone with the next artifact, as a server-side apply
// by the one field manager would have removed it. A merge patch would have kept the stale key.
func TestExternalArtifactStatusIsWrittenWhole(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	ea := f.get(&sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}).(*sourcev1.ExternalArtifact)
	ea.Status.Artifact.Metadata["stale"] = "left by an older artifact"
	f.g.Expect(k8sClient.Status().Update(f.ctx, ea)).To(Succeed())

	f.commit("bbb", map[string]string{"main.k": strings.Replace(program, `"dev"`, `"staging"`, 1)})
	obj = f.waitRevision(obj, "bbb")
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(ea), ea)).To(Succeed())
		g.Expect(ea.Status.Artifact).To(Equal(obj.Status.Artifact))
	}, timeout, interval).Should(Succeed())
}

func TestUnchangedInputIsNotRenderedAgain(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	before := renders.Load()
	artifact := obj.Status.Artifact.DeepCopy()

	f.requestReconcile(obj)
	// Ready, which already said so, is left as it was: nothing to write
	obj = f.waitFor(obj, metav1.ConditionTrue, meta.SucceededReason)
	f.g.Expect(renders.Load()).To(Equal(before), "an unchanged input must not be rendered")
	f.g.Expect(obj.Status.Artifact).To(Equal(artifact))

	// A new source commit whose program renders the same objects: rendered, nothing new published.
	f.commit("ccc", map[string]string{"main.k": program, "README.md": "docs only"})
	obj = f.waitRevision(obj, "ccc")
	f.g.Expect(renders.Load()).To(BeNumerically(">", before))
	f.g.Expect(obj.Status.Artifact.Digest).To(Equal(artifact.Digest))
	f.g.Expect(obj.Status.Artifact.Revision).To(Equal(artifact.Revision))
}

func TestArgumentsFromConfigMapAndSecret(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "args", Namespace: f.ns, Labels: map[string]string{meta.LabelKeyWatch: meta.LabelValueWatchEnabled}},
		Data:       map[string]string{"env": "qa", "replicas": "2", "unused": "x"},
	}
	f.g.Expect(k8sClient.Create(f.ctx, cm)).To(Succeed())
	obj := f.create("app", func(s *kclv1.KCLArtifactSpec) {
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "ConfigMap", Name: "args", Keys: []string{"env", "replicas"}}}
	})
	obj = f.waitReady(obj)
	f.g.Expect(obj.Status.Inventory[0].Name).To(Equal("app-qa"))

	// The labelled ConfigMap changes: the KCLArtifact renders again without being asked.
	cm.Data["env"] = "uat"
	f.g.Expect(k8sClient.Update(f.ctx, cm)).To(Succeed())
	f.g.Eventually(func() string {
		_ = k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)
		if len(obj.Status.Inventory) == 0 {
			return ""
		}
		return obj.Status.Inventory[0].Name
	}, timeout, interval).Should(Equal("app-uat"))
}

func TestMissingSecretKeepsLastArtifact(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	good := obj.Status.Artifact.DeepCopy()

	f.update(obj, func(s *kclv1.KCLArtifactSpec) {
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "Secret", Name: "missing"}}
	})
	obj = f.waitFor(obj, metav1.ConditionFalse, kclv1.ArgumentsFailedReason)
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(ContainSubstring("Secret " + f.ns + "/missing not found"))
	sameArtifact(f.g, obj.Status.Artifact, good)
	code, _ := fetch(f.g, good.URL)
	f.g.Expect(code).To(Equal(http.StatusOK))

	// Optional: the render goes on without it.
	f.update(obj, func(s *kclv1.KCLArtifactSpec) {
		s.ArgumentsFrom[0].Optional = true
	})
	f.waitReady(obj)
}

func TestSecretArgumentValuesStayOutOfStatusAndEvents(t *testing.T) {
	f := newFixture(t)
	secretValue := "s3cr3t-t0ken-value"
	f.commit("aaa", map[string]string{"main.k": "_t: int = option(\"token\")\n"})
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: f.ns},
		StringData: map[string]string{"token": secretValue}}
	f.g.Expect(k8sClient.Create(f.ctx, s)).To(Succeed())
	obj := f.create("app", func(s *kclv1.KCLArtifactSpec) {
		s.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "Secret", Name: "creds"}}
	})
	// The program types the secret as int: KCL's error would quote the value.
	obj = f.waitFor(obj, metav1.ConditionFalse, kclv1.RenderFailedReason)
	msg := conditions.GetMessage(obj, meta.ReadyCondition)
	f.g.Expect(msg).To(ContainSubstring("main.k:1:"))
	f.g.Expect(msg).NotTo(ContainSubstring(secretValue))
	var evs corev1.EventList
	f.g.Expect(k8sClient.List(f.ctx, &evs, client.InNamespace(f.ns))).To(Succeed())
	for _, e := range evs.Items {
		f.g.Expect(e.Message).NotTo(ContainSubstring(secretValue))
	}
}

func TestBrokenKCLReportsErrorAndKeepsServingLastGood(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	good := obj.Status.Artifact.DeepCopy()

	f.commit("bad", map[string]string{"main.k": "a: int = \"x\"\n"})
	// The reason, for the generation just written.
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(conditions.GetReason(obj, meta.ReadyCondition)).To(Equal(kclv1.RenderFailedReason))
		g.Expect(obj.Status.LastAttemptedRevision).To(Equal("main@sha1:bad"))
	}, timeout, interval).Should(Succeed())
	g := f.g
	msg := conditions.GetMessage(obj, meta.ReadyCondition)
	g.Expect(msg).To(MatchRegexp(`(TypeError|EvaluationError)`))
	g.Expect(msg).To(ContainSubstring("expect"))
	g.Expect(msg).To(ContainSubstring("main.k:1:"))
	g.Expect(msg).NotTo(ContainSubstring("\x1b["))
	g.Expect(msg).NotTo(ContainSubstring(os.TempDir() + "/kclartifact-"))
	g.Expect(msg).To(ContainSubstring("still serving the last good artifact " + good.Revision))
	g.Expect(obj.Status.LastAttemptedRevision).To(Equal("main@sha1:bad"))
	sameArtifact(g, obj.Status.Artifact, good)
	g.Expect(obj.Status.SourceRevision).To(Equal("main@sha1:aaa"))
	code, _ := fetch(g, good.URL)
	g.Expect(code).To(Equal(http.StatusOK))
	_, body := fetch(g, latestYAML(obj))
	g.Expect(body).To(ContainSubstring("app-dev"))
	ea := f.get(&sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}).(*sourcev1.ExternalArtifact)
	g.Expect(ea.Status.Artifact.Revision).To(Equal(good.Revision))

	var evs corev1.EventList
	g.Eventually(func() bool {
		_ = k8sClient.List(f.ctx, &evs, client.InNamespace(f.ns))
		for _, e := range evs.Items {
			if e.Reason == kclv1.RenderFailedReason && e.Type == corev1.EventTypeWarning {
				return true
			}
		}
		return false
	}, timeout, interval).Should(BeTrue())

	f.commit("fix", map[string]string{"main.k": strings.Replace(program, `"dev"`, `"fixed"`, 1)})
	obj = f.waitRevision(obj, "fix")
	g.Expect(conditions.IsReady(obj)).To(BeTrue())
	g.Expect(obj.Status.Inventory[0].Name).To(Equal("app-fixed"))
}

func TestNonKubernetesOutputIsRefused(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": "name = \"x\"\nreplicas = 2\n"})
	obj := f.waitFor(f.create("app", nil), metav1.ConditionFalse, kclv1.InvalidOutputReason)
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(ContainSubstring("document 1 is not a Kubernetes object"))
	f.g.Expect(obj.Status.Artifact).To(BeNil())
}

func TestDigestMismatchAndPathTraversalAreRefused(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	good := obj.Status.Artifact.DeepCopy()

	url, _ := serveSource(f.g, map[string]string{"main.k": program + "\n# changed\n"})
	f.setArtifact(&meta.Artifact{Path: "x", URL: url, Revision: "main@sha1:mismatch", LastUpdateTime: metav1.Now(),
		Digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000"})
	obj = f.waitFor(obj, metav1.ConditionFalse, kclv1.FetchFailedReason)
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(ContainSubstring("computed digest doesn't match"))
	sameArtifact(f.g, obj.Status.Artifact, good)

	escape := f.t.TempDir()
	url, digest := serveHostile(f.g, kclmodtest.TarGz(map[string]string{"main.k": program, "../../../../../../" + escape[1:] + "/pwned.k": "x = 1"}))
	f.setArtifact(&meta.Artifact{Path: "x", URL: url, Digest: digest, Revision: "main@sha1:evil", LastUpdateTime: metav1.Now()})
	obj = f.waitRevision(obj, "evil")
	f.g.Expect(conditions.GetReason(obj, meta.ReadyCondition)).To(Equal(kclv1.FetchFailedReason))
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(ContainSubstring("invalid name"))
	_, err := os.Stat(escape + "/pwned.k")
	f.g.Expect(os.IsNotExist(err)).To(BeTrue(), "the tarball wrote outside its directory")
	sameArtifact(f.g, obj.Status.Artifact, good)
}

// sameArtifact checks that the artifact is still the one published before. Its LastUpdateTime
// may have moved: a reconcile that read a stale cache re-stores the same content.
func sameArtifact(g *WithT, got, want *meta.Artifact) {
	g.Expect(got).NotTo(BeNil())
	g.Expect([]string{got.Digest, got.Revision, got.URL}).To(Equal([]string{want.Digest, want.Revision, want.URL}))
}

func TestCrossNamespaceSourceIsRefused(t *testing.T) {
	f := newFixture(t)
	other := newFixture(t)
	other.commit("aaa", map[string]string{"main.k": program})
	obj := f.create("app", func(s *kclv1.KCLArtifactSpec) { s.SourceRef.Namespace = other.ns })
	obj = f.waitFor(obj, metav1.ConditionFalse, acl.AccessDeniedReason)
	f.g.Expect(conditions.IsStalled(obj)).To(BeTrue())
	f.g.Expect(conditions.GetMessage(obj, meta.ReadyCondition)).To(ContainSubstring("cross-namespace references are not allowed"))
}

func TestSuspendStopsReconciliation(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	rev := obj.Status.Artifact.Revision

	f.update(obj, func(s *kclv1.KCLArtifactSpec) {
		s.Suspend = true
	})
	f.g.Eventually(func() int64 {
		_ = k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)
		return obj.Status.ObservedGeneration
	}, timeout, interval).Should(Equal(obj.Generation))

	f.commit("bbb", map[string]string{"main.k": strings.Replace(program, `"dev"`, `"new"`, 1)})
	// A reconcile request is handled (and recorded) but renders nothing while suspended.
	f.requestReconcile(obj)
	f.g.Expect(obj.Status.LastAttemptedRevision).To(Equal("main@sha1:aaa"))
	f.g.Expect(obj.Status.Artifact.Revision).To(Equal(rev))

	f.update(obj, func(s *kclv1.KCLArtifactSpec) {
		s.Suspend = false
	})
	obj = f.waitRevision(obj, "bbb")
	f.g.Expect(obj.Status.Inventory[0].Name).To(Equal("app-new"))
}

func TestRequestedAtIsHandled(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	token := f.requestReconcile(obj)
	f.g.Expect(obj.Status.LastHandledReconcileAt).To(Equal(token))
}

func TestDeleteRemovesArtifactsAndGeneratedObjects(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	local := testStorage.LocalPath(*obj.Status.Artifact)
	f.g.Expect(local).To(BeAnExistingFile())

	f.g.Expect(k8sClient.Delete(f.ctx, obj)).To(Succeed())
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj))
	}, timeout, interval).Should(BeTrue())
	for _, o := range []client.Object{&sourcev1.ExternalArtifact{}, &kustomizev1.Kustomization{}} {
		err := k8sClient.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: "app"}, o)
		f.g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T still exists", o)
	}
	f.g.Expect(local).NotTo(BeAnExistingFile())
	code, _ := fetch(f.g, latestYAML(obj))
	f.g.Expect(code).To(Equal(http.StatusNotFound))

	// another owner creates an object of the same name (issue 54): the deleted one's URLs answer
	// 404 for good, and the new one's URLs differ and serve its artifact
	deleted := obj.DeepCopy()
	again := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) { s.Arguments = map[string]string{"owner": "second"} }))
	f.g.Expect(again.UID).NotTo(Equal(deleted.UID))
	f.g.Expect(artifactstore.TokenOf(again.Status.Artifact.URL)).NotTo(Equal(artifactstore.TokenOf(deleted.Status.Artifact.URL)))
	for _, u := range []string{latestYAML(deleted), deleted.Status.Artifact.URL, artifactstore.Sibling(deleted.Status.Artifact.URL, "latest.yaml")} {
		code, _ := fetch(f.g, u)
		f.g.Expect(code).To(Equal(http.StatusNotFound), "the deleted object's %s", u)
	}
	code, body := fetch(f.g, artifactstore.Sibling(again.Status.Artifact.URL, "latest.yaml"))
	f.g.Expect(code).To(Equal(http.StatusOK), body)
	code, _ = fetch(f.g, latestYAML(again))
	f.g.Expect(code).To(Equal(http.StatusOK))
}

func TestWipedStorageIsRebuilt(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	a := obj.Status.Artifact.DeepCopy()
	// other tests' KCLArtifacts may be storing artifacts meanwhile: retry until the walk wins
	f.g.Eventually(func() error { return os.RemoveAll(storageDir + "/kclartifact") }, timeout, interval).Should(Succeed())
	code, _ := fetch(f.g, a.URL)
	f.g.Expect(code).To(Equal(http.StatusNotFound))

	f.requestReconcile(obj)
	obj = f.waitReady(obj)
	f.g.Expect(obj.Status.Artifact.Digest).To(Equal(a.Digest), "deterministic archives give the same digest")
	code, _ = fetch(f.g, a.URL)
	f.g.Expect(code).To(Equal(http.StatusOK))
}

func TestGeneratedKustomizationFollowsTemplateAndOptOut(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	noPrune := false
	tmpl := &kclv1.KustomizationTemplate{
		Interval: &metav1.Duration{Duration: 7 * time.Minute}, Timeout: &metav1.Duration{Duration: 2 * time.Minute},
		Prune: &noPrune, Wait: true, Force: true, TargetNamespace: "apps", ServiceAccountName: "deployer",
		NamePrefix: "p-", NameSuffix: "-s", DeletionPolicy: "Delete",
		DependsOn:      []kustomizev1.DependencyReference{{Name: "infra"}},
		CommonMetadata: &kustomizev1.CommonMetadata{Labels: map[string]string{"team": "a"}},
		HealthChecks:   []meta.NamespacedObjectKindReference{{Kind: "Deployment", Name: "web", Namespace: "apps"}},
		PostBuild:      &kustomizev1.PostBuild{Substitute: map[string]string{"region": "eu"}},
	}
	obj := f.create("app", func(s *kclv1.KCLArtifactSpec) { s.Kustomization = tmpl })
	f.waitReady(obj)
	ks := f.get(&kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}).(*kustomizev1.Kustomization)
	want := kustomizev1.KustomizationSpec{
		SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: "ExternalArtifact", Name: "app", Namespace: f.ns},
		Path:      "./", Interval: *tmpl.Interval, Timeout: tmpl.Timeout, Prune: false, Wait: true, Force: true,
		TargetNamespace: "apps", ServiceAccountName: "deployer", NamePrefix: "p-", NameSuffix: "-s",
		DeletionPolicy: "Delete", DependsOn: tmpl.DependsOn, CommonMetadata: tmpl.CommonMetadata,
		HealthChecks: tmpl.HealthChecks, PostBuild: tmpl.PostBuild,
	}
	f.g.Expect(ks.Spec).To(Equal(want))

	// Opting out orphans: the Kustomization is deleted with deletionPolicy Orphan, so that
	// kustomize-controller's finalizer (a test finalizer stands for it here) leaves the objects.
	ks.Finalizers = append(ks.Finalizers, "test.kcl.dev/hold")
	f.g.Expect(k8sClient.Update(f.ctx, ks)).To(Succeed())
	f.update(obj, func(s *kclv1.KCLArtifactSpec) {
		s.Kustomization.Disabled = true
	})
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(ks), ks)).To(Succeed())
		g.Expect(ks.DeletionTimestamp).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	f.g.Expect(ks.Spec.DeletionPolicy).To(Equal(kustomizev1.DeletionPolicyOrphan))
	ks.Finalizers = nil
	f.g.Expect(k8sClient.Update(f.ctx, ks)).To(Succeed())
	f.g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(ks), ks))
	}, timeout, interval).Should(BeTrue())
	obj = f.waitReady(obj)
	f.g.Expect(obj.Status.KustomizationRef).To(BeNil())
	f.g.Expect(conditions.Has(obj, kclv1.KustomizationReadyCondition)).To(BeFalse())
	f.get(&sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}})
}

func TestOptedOutFromTheStartCreatesNoKustomization(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.create("app", func(s *kclv1.KCLArtifactSpec) { s.Kustomization = &kclv1.KustomizationTemplate{Disabled: true} })
	f.waitReady(obj)
	var list kustomizev1.KustomizationList
	f.g.Expect(k8sClient.List(f.ctx, &list, client.InNamespace(f.ns))).To(Succeed())
	f.g.Expect(list.Items).To(BeEmpty())
}

// playKustomizeController reports the generated Kustomization as kustomize-controller would.
func playKustomizeController(f *fixture, name, applied string) {
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}
	f.g.Eventually(func() error {
		f.get(ks)
		ks.Status.ObservedGeneration = ks.Generation
		ks.Status.LastAppliedRevision = applied
		conditions.MarkTrue(ks, meta.ReadyCondition, meta.ReconciliationSucceededReason, "Applied revision: %s", applied)
		return k8sClient.Status().Update(f.ctx, ks)
	}, timeout, interval).Should(Succeed())
}

func waitKustomizationReady(f *fixture, obj *kclv1.KCLArtifact, status metav1.ConditionStatus, reason string) {
	f.t.Helper()
	waitCondition(f, obj, kclv1.KustomizationReadyCondition, status, reason)
}

// waitCondition waits until the KCLArtifact's condition of type typ has this status and reason.
func waitCondition(f *fixture, obj *kclv1.KCLArtifact, typ string, status metav1.ConditionStatus, reason string) {
	f.t.Helper()
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		c := conditions.Get(obj, typ)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(status), c.Message)
		g.Expect(c.Reason).To(Equal(reason), c.Message)
	}, timeout, interval).Should(Succeed())
}

// appliedApp is the KCLArtifact app of program, its artifact applied by its Kustomization; it
// returns the artifact's revision too.
func appliedApp(f *fixture) (*kclv1.KCLArtifact, string) {
	f.t.Helper()
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	rev := obj.Status.Artifact.Revision
	playKustomizeController(f, "app", rev)
	waitKustomizationReady(f, obj, metav1.ConditionTrue, meta.ReconciliationSucceededReason)
	return obj, rev
}

func TestKustomizationReadinessIsMirrored(t *testing.T) {
	f := newFixture(t)
	obj, rev := appliedApp(f)
	f.g.Expect(conditions.GetMessage(obj, kclv1.KustomizationReadyCondition)).To(Equal(appliedMessage), "the revision is status.artifact.revision, "+rev)

	// a new artifact the Kustomization has not applied yet is not "applied"
	f.commit("bbb", map[string]string{"main.k": strings.Replace(program, `"dev"`, `"new"`, 1)})
	f.waitRevision(obj, "bbb")
	waitKustomizationReady(f, obj, metav1.ConditionUnknown, meta.ProgressingReason)
}

// A suspended generated Kustomization (spec.kustomization.suspend): the KCLArtifact does not
// show an older revision as applied, and says how to resume.
func TestSuspendedKustomizationIsNotShownApplied(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) {
		s.Kustomization = &kclv1.KustomizationTemplate{Suspend: true}
	}))
	old := obj.Status.Artifact.Revision
	playKustomizeController(f, "app", old)
	waitKustomizationReady(f, obj, metav1.ConditionTrue, meta.ReconciliationSucceededReason)

	f.commit("bbb", map[string]string{"main.k": strings.Replace(program, `"dev"`, `"new"`, 1)})
	f.waitRevision(obj, "bbb")
	waitKustomizationReady(f, obj, metav1.ConditionUnknown, kclv1.KustomizationSuspendedReason)
	f.g.Expect(conditions.GetMessage(obj, kclv1.KustomizationReadyCondition)).To(ContainSubstring("Kustomization app is suspended (spec.kustomization.suspend)"))
}

// TestPrinterColumns asks the API server for the table kubectl prints for `get kclartifacts`.
func TestPrinterColumns(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))

	hc, err := rest.HTTPClientFor(restConfig)
	f.g.Expect(err).NotTo(HaveOccurred())
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/apis/%s/namespaces/%s/kclartifacts",
		strings.TrimSuffix(restConfig.Host, "/"), kclv1.GroupVersion.String(), f.ns), nil)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	f.g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	f.g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "%s", body)
	var table metav1.Table
	f.g.Expect(json.Unmarshal(body, &table)).To(Succeed())
	var names []string
	for _, c := range table.ColumnDefinitions {
		names = append(names, c.Name)
	}
	// Flux's own columns first, in Flux's order; the deploy phase (empty without phases); the
	// remediation (empty without one); the revision only with -o wide
	// and a stage's upstream and gate (empty without spec.promotion)
	f.g.Expect(names).To(Equal([]string{"Name", "Age", "Ready", "Status", "Applied", "Phase", "Remediated", "Upstream", "Gate", "Revision"}))
	for i := 5; i <= 8; i++ {
		f.g.Expect(table.ColumnDefinitions[i].Priority).To(Equal(int32(0)))
	}
	f.g.Expect(table.ColumnDefinitions[9].Priority).To(Equal(int32(1)))
	f.g.Expect(table.Rows).To(HaveLen(1))
	cells := table.Rows[0].Cells
	f.g.Expect(cells[0]).To(Equal("app"))
	f.g.Expect(cells[2]).To(Equal("True"))
	f.g.Expect(cells[3]).To(Equal(storedMessage), "the revision has its own column")
	f.g.Expect(cells[4]).To(Equal("Unknown"))
	f.g.Expect(cells[5]).To(BeNil())
	f.g.Expect(cells[6]).To(BeNil())
	f.g.Expect(cells[7]).To(BeNil())
	f.g.Expect(cells[8]).To(BeNil())
	f.g.Expect(cells[9]).To(Equal(obj.Status.Artifact.Revision))
}

// The CRD is a Flux citizen: `kubectl get fluxcd-sources` lists KCLArtifacts, and a Kustomization
// applying the CRD leaves its ${var} texts alone, as for Flux's own CRDs.
func TestCRDCategoriesAndSubstituteAnnotation(t *testing.T) {
	g := NewWithT(t)
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Name: "kclartifacts." + kclv1.GroupVersion.Group}, crd)).To(Succeed())
	g.Expect(crd.GetAnnotations()).To(HaveKeyWithValue("kustomize.toolkit.fluxcd.io/substitute", "disabled"))
	categories, _, _ := unstructured.NestedStringSlice(crd.Object, "spec", "names", "categories")
	g.Expect(categories).To(ConsistOf("all", "fluxcd", "fluxcd-sources"))
}

func TestArtifactURLFollowsTheAdvertisedAddress(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": program})
	obj := f.waitReady(f.create("app", nil))
	old := testStorage.Hostname
	testStorage.Hostname = "artifacts.example:8080"
	defer func() { testStorage.Hostname = old }()

	f.requestReconcile(obj)
	f.g.Expect(obj.Status.Artifact.URL).To(HavePrefix("http://artifacts.example:8080/kclartifact/"))
	ea := f.get(&sourcev1.ExternalArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}).(*sourcev1.ExternalArtifact)
	f.g.Expect(ea.Status.Artifact.URL).To(Equal(obj.Status.Artifact.URL))
}
