package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	eventv1 "github.com/fluxcd/pkg/apis/event/v1beta1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

const (
	// rollbackInterval is the KCLArtifact's and its Kustomization's interval in the rollback
	// tests: above config/manager's --min-interval (10s by default), so not raised.
	rollbackInterval = 20 * time.Second
	goodImage        = "ghcr.io/kcl-flux/demo-app:v1"
	// missingImage is not loaded on the node and the Pods never pull (imagePullPolicy: Never)
	missingImage = "ghcr.io/kcl-flux/demo-app:missing"
)

// rollbackArtifact is appArtifact with spec.remediation, a short interval and a short timeout.
func rollbackArtifact(ns, source, path string, retries int, timeout time.Duration) *kclv1.KCLArtifact {
	obj := appArtifact(ns, source)
	obj.Spec.Path = path
	obj.Spec.Interval = metav1.Duration{Duration: rollbackInterval}
	obj.Spec.Kustomization.Timeout = &metav1.Duration{Duration: timeout}
	obj.Spec.Remediation = &kclv1.Remediation{Retries: retries, Strategy: kclv1.RollbackStrategy}
	return obj
}

// TestRollback: with spec.remediation {retries: 1}, a commit whose image cannot start fails the
// health check twice (the retry), and the artifact before it is published and applied again
// without any render; the failed artifact is quarantined: over several intervals it is never
// applied again, and a commit that renders it again (a change to a file the program does not
// read) does not publish it. With persistent storage, the quarantine and the rolled-back artifact
// survive a restart of the controller without a render. A commit rendering another artifact
// rolls forward.
func TestRollback(t *testing.T) {
	usePersistentStorage(t)
	ctx := context.Background()
	ns := newNamespace(t, "rollback")
	settings := func(message, image string) map[string]string {
		args := map[string]any{"message": message}
		if image != "" {
			args["image"] = image
		}
		return map[string]string{"kcl.yaml": settingsFile(args)}
	}
	sha1 := createRepo(t, ns, "rollback", "node-app", settings("r1", ""))
	create(t, rollbackArtifact(ns, "rollback", "./", 1, 30*time.Second))
	waitApplied(t, ns, "app", gitRevision(sha1))
	waitAnswers(t, ns, "r1", "")
	v1 := waitHealth(t, ns, "app", gitRevision(sha1), kclv1.HealthHealthy)
	pod, err := controllerPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	serving := readyPodUIDs(t, ns)

	// the application answers r1 all along: the broken rollout never gets a Pod Ready
	stopAsking := askAllAlong(t, ns, "r1")

	sha2 := commit(t, "rollback", "an image that is not there", settings("r2", missingImage))
	committedAt := time.Now()
	// The failure shows in the conditions only for an instant now that nothing holds the
	// reconcile (the retry is asked for at once, the rollback follows the second failure): its
	// history entry keeps it, with its time.
	v2 := waitHealth(t, ns, "app", gitRevision(sha2), kclv1.HealthFailed)
	failedAt := v2.Failure.At.Time
	failedAfter := failedAt.Sub(committedAt)
	rendersAtFailure := rendersIn(t, pod, ns)
	t.Logf("the broken commit failed %s after it was made", failedAfter.Round(time.Second))

	waitRolledBackTo(t, ns, "app", v1.Digest, "rolled back to the first artifact")
	figure("rollback: failure seen to rolled back", time.Since(failedAt))
	waitRolledOut(t, ns, "r1", goodImage, v1.Revision)
	waitAnswers(t, ns, "r1", "")
	waitHealth(t, ns, "app", gitRevision(sha1), kclv1.HealthHealthy)
	figure("rollback: failure seen to v1 applied, answering", time.Since(failedAt))
	renders := rendersIn(t, pod, ns) - rendersAtFailure
	figureCount("rollback: renders during the rollback", renders)
	if renders != 0 {
		t.Errorf("the rollback rendered %d times; it publishes a kept artifact", renders)
	}
	stopAsking()
	if now := readyPodUIDs(t, ns); now != serving {
		t.Errorf("the Pods serving after the rollback are not those of the first commit: %s -> %s", serving, now)
	}

	t.Run("the rollback is reported", func(t *testing.T) {
		obj, err := getKCLArtifact(ctx, ns, "app")
		if err != nil {
			t.Fatal(err)
		}
		q := quarantineOf(t, obj)
		if q.Digest != v2.Digest || q.Revision != v2.Revision || q.SourceRevision != gitRevision(sha2) ||
			q.RolledBackTo != v1.Digest || q.Failure.Reason == "" || q.Failure.Message == "" {
			t.Errorf("status.remediation.quarantined is %+v, want %s from %s rolled back to %s, with its failure",
				q, v2.Digest, gitRevision(sha2), v1.Digest)
		}
		if r := conditions.GetReason(obj, meta.ReadyCondition); r != kclv1.RolledBackReason || conditions.IsReady(obj) {
			t.Errorf("Ready is not False RolledBack: %s", kclState(obj))
		}
		if msg := conditions.GetMessage(obj, meta.ReadyCondition); !strings.Contains(msg, gitRevision(sha2)) ||
			!strings.Contains(msg, gitRevision(sha1)) {
			t.Errorf("Ready does not name the failed and the serving revisions: %q", msg)
		}
		failed, _ := historyEntry(obj, v2.Digest)
		if failed.Health != kclv1.HealthFailed || failed.Failure == nil {
			t.Errorf("the failed entry is %+v, want health Failed with its failure", failed)
		}
		if good, _ := historyEntry(obj, v1.Digest); good.Health != kclv1.HealthHealthy || good.Missing {
			t.Errorf("the entry rolled back to is %+v, want Healthy and present", good)
		}
		ev := findEvent(t, ns, "app", corev1.EventTypeWarning, kclv1.RolledBackReason)
		diffURL := ev.Annotations[kclv1.GroupVersion.Group+"/diff"]
		if diffURL == "" {
			t.Fatalf("the RolledBack event has no %s/diff annotation: %v", kclv1.GroupVersion.Group, ev.Annotations)
		}
		if origin := ev.Annotations[kclv1.GroupVersion.Group+"/"+eventv1.MetaOriginRevisionKey]; origin != gitRevision(sha2) {
			t.Errorf("the RolledBack event's origin revision is %q, want the failed %s", origin, gitRevision(sha2))
		}
		if code := httpStatus(t, diffURL); code != http.StatusOK {
			t.Errorf("the RolledBack event's diff URL answers %d", code)
		}
		t.Logf("RolledBack: %s", ev.Message)
		findEvent(t, ns, "app", corev1.EventTypeWarning, "Retrying")
		text, err := scrapeController(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		for action, want := range map[string]float64{"retry": 1, "rollback": 1} {
			got := metricSum(text, "kcl_artifact_controller_remediations_total", map[string]string{"namespace": ns, "action": action})
			if got != want {
				t.Errorf("kcl_artifact_controller_remediations_total{action=%q} is %v, want %v", action, got, want)
			}
		}
	})

	t.Run("the failed artifact is never applied again", func(t *testing.T) {
		before := rendersIn(t, pod, ns)
		samples := neverApplied(t, ns, v1, v2, 3*rollbackInterval+5*time.Second)
		figureCount("rollback: samples, never back to v2", samples)
		if n := rendersIn(t, pod, ns) - before; n != 0 {
			t.Errorf("%d renders while nothing changed", n)
		}
	})

	t.Run("a commit rendering the failed artifact again is not published", func(t *testing.T) {
		before := rendersIn(t, pod, ns)
		sha := commit(t, "rollback", "notes", map[string]string{"NOTES.md": "not read by the program\n"})
		var obj *kclv1.KCLArtifact
		waitFor(t, "the commit rendered", func(ctx context.Context) (bool, string, error) {
			var err error
			if obj, err = getKCLArtifact(ctx, ns, "app"); err != nil {
				return false, "", err
			}
			return obj.Status.LastAttemptedRevision == gitRevision(sha), kclState(obj), nil
		})
		if n := rendersIn(t, pod, ns) - before; n != 1 {
			t.Errorf("%d renders for the commit, want 1", n)
		}
		if obj.Status.Artifact == nil || obj.Status.Artifact.Digest != v1.Digest || obj.Status.SourceRevision != gitRevision(sha1) {
			t.Errorf("the commit published %+v from %s, want to stay at %s", obj.Status.Artifact, obj.Status.SourceRevision, v1.Digest)
		}
		if len(obj.Status.History) != 2 {
			t.Errorf("the commit changed the history (a new digest?): %s", historyOf(obj))
		}
		if q := quarantineOf(t, obj); q.Digest != v2.Digest {
			t.Errorf("the quarantine changed: %+v", q)
		}
		neverApplied(t, ns, v1, v2, rollbackInterval+5*time.Second)
	})

	t.Run("persistent storage: the quarantine survives a restart", func(t *testing.T) {
		before, err := getKCLArtifact(ctx, ns, "app")
		if err != nil {
			t.Fatal(err)
		}
		uids := podUIDs(t, ns)
		newPod, began := replaceControllerPod(t)
		waitFor(t, "every artifact served again", func(ctx context.Context) (bool, string, error) {
			return allArtifactsServed(ctx)
		})
		figure("rollback: restart to artifacts answering", time.Since(began))
		requestReconcile(t, &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}})
		after, err := getKCLArtifact(ctx, ns, "app")
		if err != nil {
			t.Fatal(err)
		}
		renders := rendersIn(t, newPod, ns)
		figureCount("rollback: renders after the restart", renders)
		if renders != 0 {
			t.Errorf("the restarted controller rendered %d times", renders)
		}
		b, _ := json.Marshal(before.Status.Remediation)
		a, _ := json.Marshal(after.Status.Remediation)
		if string(a) != string(b) {
			t.Errorf("status.remediation changed across the restart:\n%s\n%s", b, a)
		}
		if c := conditions.Get(after, kclv1.RemediatedCondition); c == nil || c.Status != metav1.ConditionTrue || c.Reason != kclv1.RolledBackReason {
			t.Errorf("after the restart Remediated is %+v", c)
		}
		if after.Status.Artifact == nil || after.Status.Artifact.Digest != v1.Digest {
			t.Errorf("after the restart the artifact is %+v, want %s", after.Status.Artifact, v1.Digest)
		}
		neverApplied(t, ns, v1, v2, rollbackInterval+5*time.Second)
		waitAnswers(t, ns, "r1", "")
		if now := podUIDs(t, ns); now != uids {
			t.Errorf("the application's Pods changed across the restart: %s -> %s", uids, now)
		}
	})

	t.Run("a fixing commit rolls forward", func(t *testing.T) {
		began := time.Now()
		sha := commit(t, "rollback", "fix the image", settings("r3", ""))
		obj, _ := waitApplied(t, ns, "app", gitRevision(sha))
		waitAnswers(t, ns, "r3", "")
		figure("rollback: fixing commit to Pods answering", time.Since(began))
		if c := conditions.Get(obj, kclv1.RemediatedCondition); c != nil {
			t.Errorf("Remediated stays after rolling forward: %+v", c)
		}
		if rem := obj.Status.Remediation; rem != nil && rem.Quarantined != nil {
			t.Errorf("the quarantine stays after rolling forward: %+v", rem.Quarantined)
		}
		waitHealth(t, ns, "app", gitRevision(sha), kclv1.HealthHealthy)
	})
}

// waitHealth waits until the history entry rendered from sourceRevision has this health, and
// returns it.
func waitHealth(t *testing.T, ns, name, sourceRevision, health string) kclv1.ArtifactHistoryEntry {
	t.Helper()
	var entry kclv1.ArtifactHistoryEntry
	waitFor(t, fmt.Sprintf("the entry of %s %s", sourceRevision, health), func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, name)
		if err != nil {
			return false, "", err
		}
		for _, e := range obj.Status.History {
			if e.SourceRevision == sourceRevision && e.Health == health {
				entry = e
				return true, "", nil
			}
		}
		return false, "history " + historyOf(obj), nil
	})
	return entry
}

// waitRolledOut waits until the generated Kustomization applied revision and demo-app's
// Deployment is rolled out with message and image: every replica updated and available, no
// Pod of another template left.
func waitRolledOut(t *testing.T, ns, message, image, revision string) {
	t.Helper()
	waitFor(t, "demo-app rolled out at "+message, func(ctx context.Context) (bool, string, error) {
		var ks kustomizev1.Kustomization
		if err := suite.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &ks); err != nil {
			return false, "", err
		}
		if ks.Status.LastAppliedRevision != revision || !conditions.IsReady(&ks) {
			return false, "Kustomization at " + ks.Status.LastAppliedRevision + ": " + conditions.GetMessage(&ks, meta.ReadyCondition), nil
		}
		var dep appsv1.Deployment
		if err := suite.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-app"}, &dep); err != nil {
			return false, "", err
		}
		c := dep.Spec.Template.Spec.Containers[0]
		want := *dep.Spec.Replicas
		s := dep.Status
		if c.Image != image || c.Env[0].Value != message || s.ObservedGeneration != dep.Generation ||
			s.UpdatedReplicas != want || s.AvailableReplicas != want || s.Replicas != want {
			return false, fmt.Sprintf("Deployment %s %s=%s: %+v", c.Image, c.Env[0].Name, c.Env[0].Value, s), nil
		}
		return true, "", nil
	})
}

// askAllAlong asks the application every 300ms, in the background, until the returned function
// is called, which fails the test if any answer was not message.
func askAllAlong(t *testing.T, ns, message string) func() {
	t.Helper()
	var asked, failed atomic.Int64
	var last atomic.Value
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			asked.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			a, err := askApp(ctx, ns)
			cancel()
			if err != nil || a.Message != message {
				failed.Add(1)
				last.Store(fmt.Sprintf("%+v %v", a, err))
			}
		}
	}()
	return func() {
		t.Helper()
		close(stop)
		<-done
		t.Logf("the application answered %q to %d of %d requests", message, asked.Load()-failed.Load(), asked.Load())
		if failed.Load() > 0 || asked.Load() == 0 {
			t.Errorf("the application failed %d of %d requests; last: %v", failed.Load(), asked.Load(), last.Load())
		}
	}
}

// neverApplied samples, every second for d, that the KCLArtifact, its ExternalArtifact and its
// Kustomization stay at good and never go back to bad; it returns the number of samples.
func neverApplied(t *testing.T, ns string, good, bad kclv1.ArtifactHistoryEntry, d time.Duration) int {
	t.Helper()
	ctx := context.Background()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.After(d)
	samples := 0
	for {
		select {
		case <-deadline:
			t.Logf("%d samples over %s: the artifact stayed %s", samples, d, good.Digest)
			return samples
		case <-tick.C:
		}
		obj, err := getKCLArtifact(ctx, ns, "app")
		if err != nil {
			t.Fatal(err)
		}
		var ea sourcev1.ExternalArtifact
		if err := suite.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &ea); err != nil {
			t.Fatal(err)
		}
		var ks kustomizev1.Kustomization
		if err := suite.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &ks); err != nil {
			t.Fatal(err)
		}
		samples++
		switch {
		case obj.Status.Artifact == nil || obj.Status.Artifact.Digest != good.Digest:
			t.Fatalf("the KCLArtifact publishes %+v, want %s", obj.Status.Artifact, good.Digest)
		case ea.Status.Artifact == nil || ea.Status.Artifact.Digest != good.Digest:
			t.Fatalf("the ExternalArtifact holds %+v, want %s", ea.Status.Artifact, good.Digest)
		case ks.Status.LastAppliedRevision == bad.Revision || ks.Status.LastAttemptedRevision == bad.Revision:
			t.Fatalf("the Kustomization went back to the failed %s: applied %s, attempted %s",
				bad.Revision, ks.Status.LastAppliedRevision, ks.Status.LastAttemptedRevision)
		case ks.Status.LastAppliedRevision != good.Revision:
			t.Fatalf("the Kustomization applied %s, want %s", ks.Status.LastAppliedRevision, good.Revision)
		}
	}
}

func quarantineOf(t *testing.T, obj *kclv1.KCLArtifact) *kclv1.QuarantinedArtifact {
	t.Helper()
	if obj.Status.Remediation == nil || obj.Status.Remediation.Quarantined == nil {
		t.Fatalf("no status.remediation.quarantined: %+v", obj.Status.Remediation)
	}
	return obj.Status.Remediation.Quarantined
}

// findEvent waits for an event of the KCLArtifact with this type and reason and returns it.
func findEvent(t *testing.T, ns, name, eventType, reason string) *corev1.Event {
	t.Helper()
	var found *corev1.Event
	waitFor(t, "a "+eventType+" "+reason+" event", func(ctx context.Context) (bool, string, error) {
		var list corev1.EventList
		if err := suite.client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		for i, e := range list.Items {
			if e.InvolvedObject.Kind == kclv1.KCLArtifactKind && e.InvolvedObject.Name == name &&
				e.Type == eventType && e.Reason == reason {
				found = &list.Items[i]
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d events", len(list.Items)), nil
	})
	return found
}

// httpStatus is the status code of a GET from inside the node's network; the body is not read.
func httpStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := suite.node.HTTPClient(10 * time.Second).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// hooksProgram is a KCL program deploying demo-app with Helm hooks: a pre-upgrade Job and a
// pre-rollback Job each record the message in a ConfigMap (a migration and its way back), a
// post-install/post-upgrade smoke test checks that the new Pods answer (smoke_want, if set, is
// what it wants instead: a smoke test that fails), and a post-rollback Job checks that the
// rolled-back Pods answer.
const hooksProgram = `_message = option("message", type="str", default="h1")
_smoke_want = option("smoke_want", type="str", default="")
_image = "ghcr.io/kcl-flux/demo-app:v1"
_labels = {
    "app.kubernetes.io/name" = "demo-app"
    "app.kubernetes.io/managed-by" = "kcl-artifact-controller"
}
_restricted = {
    allowPrivilegeEscalation = False
    readOnlyRootFilesystem = True
    capabilities.drop = ["ALL"]
}
_pod_security = {runAsNonRoot = True, runAsUser = 65532, seccompProfile.type = "RuntimeDefault"}
_job = lambda name: str, hook: str, args: [str], serviceAccount: str {
    {
        apiVersion = "batch/v1"
        kind = "Job"
        metadata = {name = name, labels = _labels, annotations = {"helm.sh/hook" = hook}}
        spec = {
            backoffLimit = 0
            activeDeadlineSeconds = 120
            template = {
                metadata.labels = _labels | {"app.kubernetes.io/component" = name}
                spec = {
                    restartPolicy = "Never"
                    serviceAccountName = serviceAccount
                    automountServiceAccountToken = serviceAccount != "default"
                    securityContext = _pod_security
                    containers = [{
                        name = "job"
                        image = _image
                        imagePullPolicy = "Never"
                        args = args
                        securityContext = _restricted
                    }]
                }
            }
        }
    }
}
_pre = lambda o {
    o | {metadata.annotations = {"kcl.contrib.fluxcd.io/phase" = "pre"}}
}
[
    _pre({apiVersion = "v1", kind = "ServiceAccount", metadata = {name = "demo-app-hooks", labels = _labels}})
    _pre({
        apiVersion = "rbac.authorization.k8s.io/v1"
        kind = "Role"
        metadata = {name = "demo-app-hooks", labels = _labels}
        rules = [{apiGroups = [""], resources = ["configmaps"], verbs = ["get", "create", "patch"]}]
    })
    _pre({
        apiVersion = "rbac.authorization.k8s.io/v1"
        kind = "RoleBinding"
        metadata = {name = "demo-app-hooks", labels = _labels}
        roleRef = {apiGroup = "rbac.authorization.k8s.io", kind = "Role", name = "demo-app-hooks"}
        subjects = [{kind = "ServiceAccount", name = "demo-app-hooks"}]
    })
    _job("demo-app-pre-upgrade", "pre-upgrade", ["migrate", "-configmap", "demo-app-upgraded", "-value", _message], "demo-app-hooks")
    _job("demo-app-pre-rollback", "pre-rollback", ["migrate", "-configmap", "demo-app-rolled-back", "-value", _message], "demo-app-hooks")
    _job("demo-app-smoke", "post-install,post-upgrade", ["check", "-url", "http://demo-app/", "-want", _smoke_want if _smoke_want else _message, "-timeout", "20s"], "default")
    _job("demo-app-post-rollback", "post-rollback", ["check", "-url", "http://demo-app/", "-want", _message, "-timeout", "60s"], "default")
    {
        apiVersion = "apps/v1"
        kind = "Deployment"
        metadata = {name = "demo-app", labels = _labels}
        spec = {
            replicas = 2
            selector = {matchLabels = _labels}
            strategy.rollingUpdate = {maxUnavailable = 0, maxSurge = 1}
            template = {
                metadata = {labels = _labels}
                spec = {
                    securityContext = _pod_security
                    containers = [{
                        name = "app"
                        image = _image
                        imagePullPolicy = "Never"
                        ports = [{containerPort = 8080, name = "http"}]
                        env = [
                            {name = "MESSAGE", value = _message}
                            {name = "POD_NAME", valueFrom.fieldRef.fieldPath = "metadata.name"}
                            # what the smoke tests compare besides the message
                            {name = "SCHEMA", value = _message}
                        ]
                        readinessProbe = {httpGet = {path = "/healthz", port = "http"}, periodSeconds = 2}
                        securityContext = _restricted
                    }]
                }
            }
        }
    }
    {
        apiVersion = "v1"
        kind = "Service"
        metadata = {name = "demo-app", labels = _labels}
        spec = {selector = _labels, ports = [{name = "http", port = 80, targetPort = "http"}]}
    }
]
`

// TestRollbackPhases: a phased artifact whose post-upgrade smoke test fails is rolled back as a
// whole (main too). The rollback runs the artifact's pre-rollback hook before main is rolled
// back and its post-rollback hook after, and runs neither its pre-upgrade hook nor its smoke
// test; the next artifact runs the upgrade hooks again.
func TestRollbackPhases(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "hooks")
	settings := func(message, smokeWant string) map[string]string {
		args := map[string]any{"message": message}
		if smokeWant != "" {
			args["smoke_want"] = smokeWant
		}
		return map[string]string{"hooks/main.k": hooksProgram, "hooks/kcl.yaml": settingsFile(args)}
	}
	sha1 := createRepo(t, ns, "hooks", "node-app", settings("h1", ""))
	create(t, rollbackArtifact(ns, "hooks", "hooks", 0, time.Minute))
	waitApplied(t, ns, "app", gitRevision(sha1))
	waitAnswers(t, ns, "h1", "h1")
	v1 := waitHealth(t, ns, "app", gitRevision(sha1), kclv1.HealthHealthy)
	for _, name := range []string{"demo-app-pre-rollback", "demo-app-post-rollback"} {
		if job := findJob(t, ns, name); job != nil {
			t.Fatalf("the rollback hook %s ran in a deploy", name)
		}
	}
	if v := configMapValue(t, ns, "demo-app-upgraded"); v != "h1" {
		t.Fatalf("the pre-upgrade hook did not run at the first artifact: %q", v)
	}

	firstUpgrade := findJob(t, ns, "demo-app-pre-upgrade")
	if firstUpgrade == nil {
		t.Fatal("no pre-upgrade Job at the first artifact")
	}
	// every Job that exists from here to the fixing commit, however briefly
	stopWatching := watchJobs(t, ns)
	sha2 := commit(t, "hooks", "a smoke test that fails", settings("h2", "never"))
	// the second artifact's pre-upgrade hook runs before its main and post phases
	var upgraded *batchv1.Job
	waitFor(t, "the pre-upgrade hook of the second commit done", func(ctx context.Context) (bool, string, error) {
		upgraded = findJob(t, ns, "demo-app-pre-upgrade")
		if upgraded == nil {
			return false, "no Job", nil
		}
		return upgraded.UID != firstUpgrade.UID && upgraded.Status.Succeeded == 1, fmt.Sprintf("%+v", upgraded.Status), nil
	})
	if v := configMapValue(t, ns, "demo-app-upgraded"); v != "h2" {
		t.Fatalf("the pre-upgrade hook of the second commit wrote %q", v)
	}
	v2 := waitHealth(t, ns, "app", gitRevision(sha2), kclv1.HealthFailed)

	var obj *kclv1.KCLArtifact
	waitFor(t, "rolled back to the first artifact", func(ctx context.Context) (bool, string, error) {
		var err error
		if obj, err = getKCLArtifact(ctx, ns, "app"); err != nil {
			return false, "", err
		}
		return conditions.GetReason(obj, kclv1.RemediatedCondition) == kclv1.RolledBackReason &&
			digestOf(obj) == v1.Digest, kclState(obj), nil
	})
	q := quarantineOf(t, obj)
	failedAt := q.Failure.At.Time
	waitAnswers(t, ns, "h1", "h1")
	waitHealth(t, ns, "app", gitRevision(sha1), kclv1.HealthHealthy)
	figure("rollback phases: post failed to v1 healthy", time.Since(failedAt))
	if q.Digest != v2.Digest || q.Failure.Phase != "post" || !strings.Contains(q.Failure.Message, "demo-app-smoke") {
		t.Errorf("the quarantine is %+v, want %s failed in post at demo-app-smoke", q, v2.Digest)
	}
	if !q.RollbackPhasesApart {
		t.Errorf("the artifact rolled back to does not hold its rollback phases apart, though its hooks differ")
	}

	t.Run("the pre-rollback hook ran before main was rolled back", func(t *testing.T) {
		job := findJob(t, ns, "demo-app-pre-rollback")
		if job == nil || job.Status.Succeeded != 1 || job.Status.CompletionTime == nil {
			t.Fatalf("the pre-rollback hook did not complete: %+v", job)
		}
		if job.CreationTimestamp.Time.Before(failedAt.Truncate(time.Second)) {
			t.Errorf("the pre-rollback Job was created at %s, before the failure", job.CreationTimestamp)
		}
		if v := configMapValue(t, ns, "demo-app-rolled-back"); v != "h1" {
			t.Errorf("the pre-rollback hook wrote %q, want the first artifact's h1", v)
		}
		rs := currentReplicaSet(t, ns)
		for _, p := range podsOf(t, ns, rs) {
			if p.CreationTimestamp.Before(job.Status.CompletionTime) {
				t.Errorf("Pod %s of the rolled-back ReplicaSet was created at %s, before the pre-rollback hook completed at %s",
					p.Name, p.CreationTimestamp, job.Status.CompletionTime)
			}
		}
		post := findJob(t, ns, "demo-app-post-rollback")
		if post == nil || post.Status.Succeeded != 1 {
			t.Errorf("the post-rollback hook did not complete: %+v", post)
		}
	})

	t.Run("the upgrade hooks did not run in the rollback", func(t *testing.T) {
		for _, j := range stopWatching() {
			if j.name == "demo-app-pre-upgrade" && j.uid != firstUpgrade.UID && j.uid != upgraded.UID {
				t.Errorf("the pre-upgrade hook ran in the rollback: Job %s created %s, its Pod template stamped %s (the first artifact's: %s)",
					j.uid, j.created.Format(time.RFC3339), j.revision, firstUpgrade.Spec.Template.Annotations["kcl.contrib.fluxcd.io/revision"])
			}
			if j.name == "demo-app-smoke" && !j.created.Before(failedAt.Truncate(time.Second)) {
				t.Errorf("the smoke test ran in the rollback: Job %s created %s, Pod template stamped %s",
					j.uid, j.created.Format(time.RFC3339), j.revision)
			}
		}
		if job := findJob(t, ns, "demo-app-pre-upgrade"); job != nil && job.UID != upgraded.UID {
			t.Errorf("the pre-upgrade hook ran again in the rollback (Job created %s)", job.CreationTimestamp)
		}
		for _, p := range jobPods(t, ns, "demo-app-pre-upgrade") {
			if !p.CreationTimestamp.Time.Before(failedAt.Truncate(time.Second)) {
				t.Errorf("a Pod of the pre-upgrade hook was created at %s, after the failure", p.CreationTimestamp)
			}
		}
		if v := configMapValue(t, ns, "demo-app-upgraded"); v != "h2" {
			t.Errorf("the pre-upgrade hook ran in the rollback: it wrote %q", v)
		}
		if job := findJob(t, ns, "demo-app-smoke"); job != nil && job.Status.Succeeded == 1 {
			t.Errorf("a smoke test ran in the rollback")
		}
	})

	t.Run("the next commit runs the upgrade hooks", func(t *testing.T) {
		began := time.Now()
		sha := commit(t, "hooks", "fix the smoke test", settings("h3", ""))
		waitApplied(t, ns, "app", gitRevision(sha))
		waitAnswers(t, ns, "h3", "h3")
		waitHealth(t, ns, "app", gitRevision(sha), kclv1.HealthHealthy)
		figure("rollback phases: fixing commit to healthy", time.Since(began))
		job := findJob(t, ns, "demo-app-pre-upgrade")
		if job == nil || job.UID == upgraded.UID || job.Status.Succeeded != 1 {
			t.Errorf("the pre-upgrade hook did not run for the fixing commit: %+v", job)
		}
		if v := configMapValue(t, ns, "demo-app-upgraded"); v != "h3" {
			t.Errorf("the pre-upgrade hook of the fixing commit wrote %q", v)
		}
		obj, err := getKCLArtifact(ctx, ns, "app")
		if err != nil {
			t.Fatal(err)
		}
		if c := conditions.Get(obj, kclv1.RemediatedCondition); c != nil {
			t.Errorf("Remediated stays after rolling forward: %+v", c)
		}
	})
}

// seenJob is a Job watchJobs saw.
type seenJob struct {
	name, revision string
	uid            types.UID
	created        time.Time
}

// watchJobs lists the Jobs of ns every 250ms in the background, so that a Job created and
// deleted between two checks of a test is seen too; the returned function stops it and returns
// every Job seen, by UID, in order of creation.
func watchJobs(t *testing.T, ns string) func() []seenJob {
	t.Helper()
	seen := map[types.UID]seenJob{}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			var jobs batchv1.JobList
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := suite.client.List(ctx, &jobs, client.InNamespace(ns)); err == nil {
				for _, j := range jobs.Items {
					if _, ok := seen[j.UID]; !ok {
						seen[j.UID] = seenJob{name: j.Name, uid: j.UID, created: j.CreationTimestamp.Time,
							revision: j.Spec.Template.Annotations["kcl.contrib.fluxcd.io/revision"]}
					}
				}
			}
			cancel()
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return func() []seenJob {
		close(stop)
		<-done
		var out []seenJob
		for _, j := range seen {
			out = append(out, j)
		}
		slices.SortFunc(out, func(a, b seenJob) int { return a.created.Compare(b.created) })
		for _, j := range out {
			t.Logf("Job %s %s created %s, Pod template stamped %s", j.name, j.uid, j.created.Format(time.RFC3339), j.revision)
		}
		return out
	}
}

// readyPodUIDs are the UIDs of the Ready Pods of a namespace, sorted, for comparison.
func readyPodUIDs(t *testing.T, ns string) string {
	t.Helper()
	return podsIn(t, ns, func(p *corev1.Pod) bool { return podReady(p) && p.DeletionTimestamp == nil }, podUID)
}

func digestOf(obj *kclv1.KCLArtifact) string {
	if obj.Status.Artifact == nil {
		return ""
	}
	return obj.Status.Artifact.Digest
}

// findJob is the Job of this name, nil when there is none.
func findJob(t *testing.T, ns, name string) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	err := suite.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, job)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// jobPods are the Pods of the Jobs named name (by the job-name label Jobs set).
func jobPods(t *testing.T, ns, name string) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := suite.client.List(context.Background(), &pods, client.InNamespace(ns),
		client.MatchingLabels{"batch.kubernetes.io/job-name": name}); err != nil {
		t.Fatal(err)
	}
	return pods.Items
}

// podsOf are the Pods a ReplicaSet owns.
func podsOf(t *testing.T, ns string, rs *appsv1.ReplicaSet) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	if err := suite.client.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if slices.ContainsFunc(p.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == rs.UID }) {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		t.Fatalf("ReplicaSet %s has no Pods", rs.Name)
	}
	return out
}

// configMapValue is data.version of a ConfigMap a hook wrote ("" when there is none).
func configMapValue(t *testing.T, ns, name string) string {
	t.Helper()
	var cm corev1.ConfigMap
	err := suite.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &cm)
	if apierrors.IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data["version"]
}

// waitRolledBackTo waits until KCLArtifact ns/name says Remediated=True RolledBack and serves
// digest, and returns it.
func waitRolledBackTo(t *testing.T, ns, name, digest, what string) *kclv1.KCLArtifact {
	t.Helper()
	var rolled *kclv1.KCLArtifact
	waitFor(t, what, func(ctx context.Context) (bool, string, error) {
		var err error
		if rolled, err = getKCLArtifact(ctx, ns, name); err != nil {
			return false, "", err
		}
		c := conditions.Get(rolled, kclv1.RemediatedCondition)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == kclv1.RolledBackReason &&
			rolled.Status.Artifact != nil && rolled.Status.Artifact.Digest == digest, kclState(rolled), nil
	})
	return rolled
}
