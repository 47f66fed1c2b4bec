package controller

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
)

// phasedProgram has a pre Job and a ConfigMap marked as a Helm pre hook, a Deployment, a post Job
// marked as an Argo CD PostSync hook, and a pre-delete hook, which is left out.
const phasedProgram = `_v = option("v") or "1"
_job = lambda name: str, ann: {str:str} {
    {
        apiVersion = "batch/v1", kind = "Job"
        metadata = {name = name, annotations = ann}
        spec.template.spec = {restartPolicy = "Never", containers = [{name = "c", image = "busybox:${_v}"}]}
    }
}
[
    _job("migrate", {"kcl.contrib.fluxcd.io/phase" = "pre"})
    {apiVersion = "v1", kind = "ConfigMap", metadata = {name = "schema", annotations = {"helm.sh/hook" = "pre-install,pre-upgrade"}}, data.v = _v}
    {apiVersion = "apps/v1", kind = "Deployment", metadata.name = "web", spec = {selector.matchLabels.app = "web", template = {metadata.labels.app = "web", spec.containers = [{name = "web", image = "web:${_v}"}]}}}
    _job("smoke", {"argocd.argoproj.io/hook" = "PostSync"})
    _job("cleanup", {"helm.sh/hook" = "pre-delete"})
]
`

// unphasedProgram is the same application without hooks.
const unphasedProgram = `[{apiVersion = "apps/v1", kind = "Deployment", metadata.name = "web", spec = {selector.matchLabels.app = "web", template = {metadata.labels.app = "web", spec.containers = [{name = "web", image = "web:1"}]}}}]
`

func TestPhasesAreChainedKustomizations(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": phasedProgram})
	tmpl := &kclv1.KustomizationTemplate{
		Timeout: &metav1.Duration{Duration: 2 * time.Minute}, TargetNamespace: f.ns, ServiceAccountName: "deployer",
		DependsOn: []kustomizev1.DependencyReference{{Name: "infra"}},
		Phases:    &kclv1.PhaseTemplates{Post: &kclv1.PhaseTemplate{Timeout: &metav1.Duration{Duration: 30 * time.Second}}},
	}
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) { s.Kustomization = tmpl }))

	f.g.Expect(obj.Status.Phases).To(Equal([]kclv1.PhaseStatus{
		{Name: "pre", Objects: 2, Kustomization: "app-pre", State: kclv1.PhaseApplying, Message: "waiting for kustomize-controller"},
		{Name: "main", Objects: 1, Kustomization: "app", State: kclv1.PhaseApplying, Message: "waiting for kustomize-controller"},
		{Name: "post", Objects: 1, Kustomization: "app-post", State: kclv1.PhaseApplying, Message: "waiting for kustomize-controller"},
	}))
	f.g.Expect(obj.Status.InventoryCount).To(Equal(4), "the pre-delete hook is left out")
	f.g.Expect(obj.Status.Phase).To(Equal("pre: Applying"))
	f.g.Expect(obj.Status.KustomizationRef.Name).To(Equal("app"))

	files := artifactFilesAt(f.g, obj.Status.Artifact.URL)
	f.g.Expect(files).To(HaveLen(5))
	// a rollback to this artifact runs the pre Job (this controller's annotation) and the
	// PostSync Job, not the Helm pre-install/pre-upgrade hook: the rollback phases are apart
	f.g.Expect(files["rollback/pre/manifests.yaml"]).To(And(ContainSubstring("name: migrate"), Not(ContainSubstring("name: schema"))))
	f.g.Expect(files["rollback/post/manifests.yaml"]).To(ContainSubstring("name: smoke"))
	f.g.Expect(files["pre/manifests.yaml"]).To(And(ContainSubstring("name: migrate"), ContainSubstring("name: schema")))
	f.g.Expect(files["main/manifests.yaml"]).To(ContainSubstring("name: web"))
	f.g.Expect(files["post/manifests.yaml"]).To(ContainSubstring("name: smoke"))
	f.g.Expect(strings.Join(mapValues(files), "")).NotTo(ContainSubstring("cleanup"))
	firstRun := jobRevision(f.g, files["pre/manifests.yaml"])
	f.g.Expect(firstRun).To(HavePrefix("sha256:"))
	f.g.Expect(jobRevision(f.g, files["post/manifests.yaml"])).To(Equal(firstRun))

	spec := func(name string) kustomizev1.KustomizationSpec {
		return f.get(&kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}).(*kustomizev1.Kustomization).Spec
	}
	base := kustomizev1.KustomizationSpec{
		SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: "ExternalArtifact", Name: "app", Namespace: f.ns},
		Interval:  obj.Spec.Interval, Timeout: tmpl.Timeout, Prune: true, TargetNamespace: f.ns, ServiceAccountName: "deployer",
	}
	want := func(path string, wait, force bool, timeout *metav1.Duration, after ...string) kustomizev1.KustomizationSpec {
		s := base
		s.Path, s.Wait, s.Force, s.Timeout = path, wait, force, timeout
		s.DependsOn = []kustomizev1.DependencyReference{{Name: "infra"}}
		for _, a := range after {
			s.DependsOn = append(s.DependsOn, kustomizev1.DependencyReference{Name: a})
		}
		return s
	}
	f.g.Expect(spec("app-pre")).To(Equal(want("./pre", true, true, tmpl.Timeout)))
	f.g.Expect(spec("app")).To(Equal(want("./main", true, false, tmpl.Timeout, "app-pre")), "main waits: post must find it rolled out")
	f.g.Expect(spec("app-post")).To(Equal(want("./post", true, true, tmpl.Phases.Post.Timeout, "app")))

	// pre applied, main waiting for it: the phase summary moves on
	rev := obj.Status.Artifact.Revision
	playKustomizeController(f, "app-pre", rev)
	playDependencyNotReady(f, "app-post", rev, "app")
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.Phase).To(Equal("main: Applying"))
		g.Expect(obj.Status.Phases[0].State).To(Equal(kclv1.PhaseReady))
		g.Expect(obj.Status.Phases[2].State).To(Equal(kclv1.PhaseWaiting))
	}, timeout, interval).Should(Succeed())
	waitKustomizationReady(f, obj, metav1.ConditionUnknown, meta.ProgressingReason)

	playKustomizeController(f, "app", rev)
	playKustomizeController(f, "app-post", rev)
	waitKustomizationReady(f, obj, metav1.ConditionTrue, meta.SucceededReason)
	f.g.Expect(obj.Status.Phase).To(Equal(kclv1.PhaseReady))

	// a reconcile with nothing new publishes the same artifact: the Jobs would not run again
	f.requestReconcile(obj)
	obj = f.waitReady(obj)
	f.g.Expect(obj.Status.Artifact.Revision).To(Equal(rev))

	// a new commit is a new run of the Jobs
	f.commit("bbb", map[string]string{"main.k": strings.Replace(phasedProgram, `or "1"`, `or "2"`, 1)})
	obj = f.waitRevision(obj, "bbb")
	files = artifactFilesAt(f.g, obj.Status.Artifact.URL)
	f.g.Expect(jobRevision(f.g, files["pre/manifests.yaml"])).NotTo(Equal(firstRun))
}

// A failed pre Job: the KCLArtifact says which Job and why, pages with a warning, and the fixing
// commit recovers.
func TestFailedPreJobIsReported(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": phasedProgram})
	obj := f.waitReady(f.create("app", func(s *kclv1.KCLArtifactSpec) {
		s.Kustomization = &kclv1.KustomizationTemplate{TargetNamespace: f.ns}
	}))
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: "migrate", Namespace: f.ns},
		Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}
	f.g.Expect(k8sClient.Create(f.ctx, job)).To(Succeed())
	// what the Job controller writes when the Pods failed (there is no Job controller in envtest)
	now := metav1.Now()
	job.Status.StartTime = &now
	job.Status.Conditions = []batchv1.JobCondition{
		{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit", LastTransitionTime: now},
	}
	f.g.Expect(k8sClient.Status().Update(f.ctx, job)).To(Succeed())

	rev := obj.Status.Artifact.Revision
	playKustomizeFailure(f, "app-pre", rev, meta.HealthCheckFailedReason,
		"health check failed after 1m0s: failed early due to stalled resources: [Job/"+f.ns+"/migrate status: 'Failed']")
	playDependencyNotReady(f, "app", rev, "app-pre")
	waitKustomizationReady(f, obj, metav1.ConditionFalse, kclv1.PhaseFailedReason)
	f.g.Expect(obj.Status.Phase).To(Equal("pre: Failed"))
	why := "Job " + f.ns + "/migrate failed: BackoffLimitExceeded: Job has reached the specified backoff limit"
	f.g.Expect(obj.Status.Phases[0].Message).To(Equal(why))
	f.g.Expect(conditions.GetMessage(obj, kclv1.KustomizationReadyCondition)).To(Equal("phase pre (Kustomization app-pre): " + why))
	f.g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		g.Expect(obj.Status.Phases[1].State).To(Equal(kclv1.PhaseWaiting))
	}, timeout, interval).Should(Succeed())
	f.g.Eventually(func() []string { return reasons(eventsReceiver.of(obj)) }, timeout, interval).
		Should(ContainElement("error/" + kclv1.PhaseFailedReason))

	f.commit("bbb", map[string]string{"main.k": strings.Replace(phasedProgram, `or "1"`, `or "2"`, 1)})
	obj = f.waitRevision(obj, "bbb")
	rev = obj.Status.Artifact.Revision
	for _, name := range []string{"app-pre", "app", "app-post"} {
		playKustomizeController(f, name, rev)
	}
	waitKustomizationReady(f, obj, metav1.ConditionTrue, meta.SucceededReason)
}

// Removing every marked object goes back to one Kustomization at the artifact's root; the phase
// Kustomizations are deleted, their objects pruned by kustomize-controller as the template says.
func TestRemovingThePhasesRemovesTheirKustomizations(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": phasedProgram})
	obj := f.waitReady(f.create("app", nil))
	f.g.Expect(obj.Status.Phases).To(HaveLen(3))

	f.commit("bbb", map[string]string{"main.k": unphasedProgram})
	obj = f.waitRevision(obj, "bbb")
	f.g.Expect(obj.Status.Phases).To(BeEmpty())
	f.g.Expect(obj.Status.Phase).To(BeEmpty())
	for _, name := range []string{"app-pre", "app-post"} {
		f.g.Eventually(func() bool {
			return apierrors.IsNotFound(k8sClient.Get(f.ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &kustomizev1.Kustomization{}))
		}, timeout, interval).Should(BeTrue(), name)
	}
	ks := f.get(&kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}}).(*kustomizev1.Kustomization)
	f.g.Expect(ks.Spec.Path).To(Equal("./"))
	f.g.Expect(ks.Spec.DependsOn).To(BeEmpty())
	f.g.Expect(artifactFilesAt(f.g, obj.Status.Artifact.URL)).To(HaveKey("manifests.yaml"))
}

func playKustomizeFailure(f *fixture, name, attempted, reason, message string) {
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}
	f.g.Eventually(func() error {
		f.get(ks)
		ks.Status.ObservedGeneration = ks.Generation
		ks.Status.LastAttemptedRevision = attempted
		conditions.MarkFalse(ks, meta.ReadyCondition, reason, "%s", message)
		return k8sClient.Status().Update(f.ctx, ks)
	}, timeout, interval).Should(Succeed())
}

func playDependencyNotReady(f *fixture, name, attempted, dependency string) {
	playKustomizeFailure(f, name, attempted, meta.DependencyNotReadyReason,
		"dependency '"+f.ns+"/"+dependency+"' is not ready")
}

// artifactFilesAt downloads an artifact and returns its files.
func artifactFilesAt(g Gomega, url string) map[string]string {
	code, body := fetch(g, url)
	g.Expect(code).To(Equal(200))
	gz, err := gzip.NewReader(strings.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		g.Expect(err).NotTo(HaveOccurred())
		if h.Typeflag == tar.TypeReg {
			var b bytes.Buffer
			_, err := io.Copy(&b, tr)
			g.Expect(err).NotTo(HaveOccurred())
			files[h.Name] = b.String()
		}
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// jobRevision is the revision annotation of the first Job's Pod template in a YAML stream.
func jobRevision(g Gomega, yaml string) string {
	i := strings.Index(yaml, phases.RevisionAnnotation+": ")
	g.Expect(i).To(BeNumerically(">=", 0), "no Job carries the revision")
	rest := yaml[i+len(phases.RevisionAnnotation)+2:]
	return strings.TrimSpace(rest[:strings.IndexByte(rest, '\n')])
}

// The next phase is asked for the moment the one before it is Ready at the artifact's revision,
// not when kustomize-controller polls its dependencies again; a failed or unready phase asks for
// nothing, and a phase that stays waiting is asked once.
func TestNextPhaseIsAskedForWhenItsPredecessorIsReady(t *testing.T) {
	f := newFixture(t)
	f.commit("aaa", map[string]string{"main.k": phasedProgram})
	obj := f.waitReady(f.create("app", nil))
	rev := obj.Status.Artifact.Revision
	requested := func(name string) string {
		ks := f.get(&kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}})
		return ks.GetAnnotations()[meta.ReconcileRequestAnnotation]
	}
	waitPhase := func(phase string) {
		f.t.Helper()
		f.g.Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(f.ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
			g.Expect(obj.Status.Phase).To(Equal(phase))
		}, timeout, interval).Should(Succeed())
	}

	// a failed pre phase blocks main: the reconcile that read the failure asked for nothing
	playDependencyNotReady(f, "app", rev, "app-pre")
	playDependencyNotReady(f, "app-post", rev, "app")
	playKustomizeFailure(f, "app-pre", rev, meta.HealthCheckFailedReason, "health check failed")
	waitPhase("pre: Failed")
	f.g.Expect(requested("app")).To(BeEmpty())
	f.g.Expect(requested("app-post")).To(BeEmpty())

	// pre Ready at this revision: main is asked for, post (waiting on main) is not
	playKustomizeController(f, "app-pre", rev)
	f.g.Eventually(func() string { return requested("app") }, timeout, interval).ShouldNot(BeEmpty())
	waitPhase("main: Waiting")
	askedMain := requested("app")
	f.g.Expect(requested("app-post")).To(BeEmpty())

	// kustomize-controller handles the request and main still waits (another dependency of the
	// template's, say): it is not asked again for the same turn of pre
	playHandled(f, "app", askedMain)
	playKustomizeController(f, "app", rev)
	f.g.Eventually(func() string { return requested("app-post") }, timeout, interval).ShouldNot(BeEmpty())
	f.g.Expect(requested("app")).To(Equal(askedMain))

	// a new artifact: pre Ready at the old revision asks for nothing, at the new one it does
	f.commit("bbb", map[string]string{"main.k": strings.Replace(phasedProgram, `or "1"`, `or "2"`, 1)})
	obj = f.waitRevision(obj, "bbb")
	playDependencyNotReady(f, "app", obj.Status.Artifact.Revision, "app-pre")
	waitPhase("pre: Applying")
	f.g.Expect(requested("app")).To(Equal(askedMain))
	playKustomizeController(f, "app-pre", obj.Status.Artifact.Revision)
	f.g.Eventually(func() string { return requested("app") }, timeout, interval).ShouldNot(Equal(askedMain))
}

// playHandled is kustomize-controller handling a reconcile request and finding a dependency still
// not ready.
func playHandled(f *fixture, name, at string) {
	ks := &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}}
	f.g.Eventually(func() error {
		f.get(ks)
		ks.Status.LastHandledReconcileAt = at
		conditions.MarkFalse(ks, meta.ReadyCondition, meta.DependencyNotReadyReason, "dependency '%s/infra' is not ready", f.ns)
		return k8sClient.Status().Update(f.ctx, ks)
	}, timeout, interval).Should(Succeed())
}
