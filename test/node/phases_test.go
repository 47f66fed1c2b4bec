package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// TestDeployPhases deploys fixtures/node-app with its migration: a pre Job writes the schema the
// new Pods read when they start, a post Job checks that they answer. Each commit runs both Jobs
// again, a reconcile with nothing new runs neither, and a failing migration holds the rollout back
// while the old Pods keep answering, until the fixing commit.
func TestDeployPhases(t *testing.T) {
	ns := newNamespace(t, "phases")
	settings := func(message string, fails bool) map[string]string {
		return map[string]string{"kcl.yaml": settingsFile(map[string]any{
			"message": message, "migration": true, "migration_fails": fails})}
	}
	sha := createRepo(t, ns, "phases", "node-app", settings("p1", false))
	began := time.Now()
	create(t, appArtifact(ns, "phases"))
	waitApplied(t, ns, "app", gitRevision(sha))
	rollout := phasedRollout(t, ns)
	waitAnswers(t, ns, "p1", "p1")
	figure("phases: KCLArtifact created to post Job done", time.Since(began))
	figure("phases: pre Job created to every phase Ready", rollout)
	figure("phases: of which the Jobs ran (created to done)", jobsRan(t, ns))
	first := jobRuns(t, ns)
	preBeforeRollout(t, ns, first)

	t.Run("a reconcile with nothing new runs no Job", func(t *testing.T) {
		requestReconcile(t, &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}})
		for _, name := range []string{"app-pre", "app", "app-post"} {
			requestReconcile(t, &kustomizev1.Kustomization{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
		}
		if now := jobRuns(t, ns); now != first {
			t.Fatalf("the Jobs ran again without a change: %+v -> %+v", first, now)
		}
	})

	t.Run("a commit runs the Jobs again", func(t *testing.T) {
		began := time.Now()
		sha := commit(t, "phases", "schema p2", settings("p2", false))
		waitApplied(t, ns, "app", gitRevision(sha))
		rollout := phasedRollout(t, ns)
		waitAnswers(t, ns, "p2", "p2")
		figure("phases: commit to post Job done", time.Since(began))
		figure("phases: pre Job created to every phase Ready", rollout)
		figure("phases: of which the Jobs ran (created to done)", jobsRan(t, ns))
		second := jobRuns(t, ns)
		if second.migrate == first.migrate || second.smoke == first.smoke {
			t.Fatalf("the Jobs did not run again: %+v -> %+v", first, second)
		}
		preBeforeRollout(t, ns, second)
	})

	t.Run("a failing migration holds the rollout back", func(t *testing.T) {
		sha := commit(t, "phases", "a migration that fails", settings("p3", true))
		var obj *kclv1.KCLArtifact
		waitFor(t, "the pre phase failed", func(ctx context.Context) (bool, string, error) {
			var err error
			if obj, err = getKCLArtifact(ctx, ns, "app"); err != nil {
				return false, "", err
			}
			return obj.Status.SourceRevision == gitRevision(sha) && obj.Status.Phase == "pre: Failed", kclState(obj) + " phase " + obj.Status.Phase, nil
		})
		c := conditions.Get(obj, kclv1.KustomizationReadyCondition)
		wantJob := "Job " + ns + "/demo-app-migrate failed: "
		if c == nil || c.Reason != kclv1.PhaseFailedReason || !strings.Contains(c.Message, wantJob) {
			t.Fatalf("KustomizationReady does not say which Job failed: %+v", c)
		}
		t.Logf("KustomizationReady: %s", c.Message)
		waitWarning(t, ns, "app", kclv1.PhaseFailedReason, wantJob)
		for range 10 {
			if a, err := askApp(context.Background(), ns); err != nil || a.Message != "p2" || a.Schema != "p2" {
				t.Fatalf("while the migration fails, the old Pods must answer p2: %+v, %v", a, err)
			}
		}
		var dep appsv1.Deployment
		if err := suite.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "demo-app"}, &dep); err != nil {
			t.Fatal(err)
		}
		if env := dep.Spec.Template.Spec.Containers[0].Env[0]; env.Value != "p2" {
			t.Fatalf("the Deployment was changed although its pre phase failed: MESSAGE=%q", env.Value)
		}

		began := time.Now()
		sha = commit(t, "phases", "fix the migration", settings("p4", false))
		waitApplied(t, ns, "app", gitRevision(sha))
		waitAnswers(t, ns, "p4", "p4")
		figure("phases: fixing commit to post Job done", time.Since(began))
	})
}

// jobs identifies one run of each Job: a Job that runs again is a new object.
type jobs struct{ migrate, smoke types.UID }

// jobRuns checks that both Jobs completed and returns their runs.
func jobRuns(t *testing.T, ns string) jobs {
	t.Helper()
	var out jobs
	for name, uid := range map[string]*types.UID{"demo-app-migrate": &out.migrate, "demo-app-smoke": &out.smoke} {
		j := getJob(t, ns, name)
		if j.Status.Succeeded != 1 || j.Status.CompletionTime == nil {
			t.Fatalf("Job %s did not complete: %+v", name, j.Status)
		}
		*uid = j.UID
	}
	return out
}

// phasedRollout is the time from the first object of the rollout, the pre Job, to now, when every
// phase is Ready (to the second: the Job's creation timestamp).
func phasedRollout(t *testing.T, ns string) time.Duration {
	t.Helper()
	return time.Since(getJob(t, ns, "demo-app-migrate").CreationTimestamp.Time)
}

// jobsRan is how long the pre and post Jobs took, each from its creation to its completion (to
// the second: the API's timestamps): the part of a phased rollout that is the Jobs' own.
func jobsRan(t *testing.T, ns string) time.Duration {
	t.Helper()
	var d time.Duration
	for _, name := range []string{"demo-app-migrate", "demo-app-smoke"} {
		j := getJob(t, ns, name)
		if j.Status.CompletionTime == nil {
			t.Fatalf("Job %s did not complete", name)
		}
		d += j.Status.CompletionTime.Sub(j.CreationTimestamp.Time)
	}
	return d
}

func getJob(t *testing.T, ns, name string) *batchv1.Job {
	t.Helper()
	j := &batchv1.Job{}
	if err := suite.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, j); err != nil {
		t.Fatal(err)
	}
	return j
}

// preBeforeRollout proves the order from the objects' timestamps: the migration completed before
// the ReplicaSet of the current Pods was created, and the smoke test started after it.
func preBeforeRollout(t *testing.T, ns string, run jobs) {
	t.Helper()
	rs := currentReplicaSet(t, ns)
	migrate, smoke := getJob(t, ns, "demo-app-migrate"), getJob(t, ns, "demo-app-smoke")
	if migrate.UID != run.migrate || smoke.UID != run.smoke {
		t.Fatalf("the Jobs changed under the test")
	}
	if rs.CreationTimestamp.Before(migrate.Status.CompletionTime) {
		t.Errorf("ReplicaSet %s was created at %s, before the migration completed at %s",
			rs.Name, rs.CreationTimestamp, migrate.Status.CompletionTime)
	}
	if smoke.CreationTimestamp.Before(&rs.CreationTimestamp) {
		t.Errorf("the smoke test was created at %s, before ReplicaSet %s at %s",
			smoke.CreationTimestamp, rs.Name, rs.CreationTimestamp)
	}
	t.Logf("migration completed %s, ReplicaSet %s created %s, smoke test created %s",
		migrate.Status.CompletionTime.Format(time.RFC3339), rs.Name, rs.CreationTimestamp.Format(time.RFC3339),
		smoke.CreationTimestamp.Format(time.RFC3339))
}

// currentReplicaSet is the ReplicaSet of the Deployment's current revision.
func currentReplicaSet(t *testing.T, ns string) *appsv1.ReplicaSet {
	t.Helper()
	ctx := context.Background()
	var dep appsv1.Deployment
	if err := suite.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-app"}, &dep); err != nil {
		t.Fatal(err)
	}
	var list appsv1.ReplicaSetList
	if err := suite.client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i, rs := range list.Items {
		if rs.Annotations["deployment.kubernetes.io/revision"] == dep.Annotations["deployment.kubernetes.io/revision"] {
			return &list.Items[i]
		}
	}
	t.Fatalf("no ReplicaSet of revision %s", dep.Annotations["deployment.kubernetes.io/revision"])
	return nil
}

// requestReconcile asks for a reconcile as `flux reconcile` does and waits until it was handled.
func requestReconcile(t *testing.T, obj client.Object) {
	t.Helper()
	token := time.Now().Format(time.RFC3339Nano)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, meta.ReconcileRequestAnnotation, token)
	if err := suite.client.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, obj.GetName()+" handled reconcile request "+token, func(ctx context.Context) (bool, string, error) {
		if err := suite.client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, "", err
		}
		var last string
		switch o := obj.(type) {
		case *kclv1.KCLArtifact:
			last = o.Status.GetLastHandledReconcileRequest()
		case *kustomizev1.Kustomization:
			last = o.Status.GetLastHandledReconcileRequest()
		}
		return last == token, "last handled " + last, nil
	})
}

// waitWarning waits for a Warning event of the KCLArtifact with this reason and text.
func waitWarning(t *testing.T, ns, name, reason, text string) {
	t.Helper()
	waitFor(t, "a "+reason+" warning", func(ctx context.Context) (bool, string, error) {
		var list corev1.EventList
		if err := suite.client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == kclv1.KCLArtifactKind && e.InvolvedObject.Name == name &&
				e.Type == corev1.EventTypeWarning && e.Reason == reason && strings.Contains(e.Message, text) {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("%d events", len(list.Items)), nil
	})
}
