// Package smoke proves that the local Flux environment of test/fluxenv works end to end with
// Flux alone: Git server -> source-controller -> kustomize-controller -> kube-apiserver.
//
// It needs the binaries of `make testbin` (bin/testbin.env); without them it fails, it never skips.
package smoke

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// waitTimeout bounds every wait: generous, the machine has 2 cores.
const waitTimeout = 3 * time.Minute

func TestFluxSmoke(t *testing.T) {
	tb, err := fluxenv.LoadTestBin()
	if err != nil {
		t.Fatalf("%v", err) // the message says to run `make testbin`
	}
	start := time.Now()
	env, err := fluxenv.Start(context.Background(), fluxenv.Options{
		WorkDir: t.TempDir(),
		TestBin: tb,
		Logf:    t.Logf,
	})
	if err != nil {
		t.Fatalf("starting the Flux environment: %v", err)
	}
	t.Logf("environment started in %s: kube-apiserver :%d, git %s, source-controller storage %s",
		time.Since(start).Round(time.Millisecond), env.Ports.APIServer, env.Git.URLBase, env.StorageAddr)
	t.Cleanup(func() {
		procs := env.Processes()
		if len(procs) != 4 {
			t.Errorf("expected 4 processes (etcd, kube-apiserver, source-controller, kustomize-controller), got %v", procs)
		}
		if t.Failed() {
			t.Logf("logs of the environment:\n%s", env.LogTails(80))
		}
		stopStart := time.Now()
		if err := env.Stop(); err != nil {
			t.Errorf("stopping the environment: %v", err)
		}
		t.Logf("environment stopped in %s", time.Since(stopStart).Round(time.Millisecond))
		for _, p := range procs {
			if _, err := os.Stat("/proc/" + strconv.Itoa(p.PID)); err == nil {
				t.Errorf("%s (pid %d) is still alive after Stop", p.Name, p.PID)
			}
		}
	})

	t.Run("apply-change-prune", func(t *testing.T) {
		t.Parallel()
		testApplyChangePrune(t, env)
	})
	t.Run("health-check-fails", func(t *testing.T) {
		t.Parallel()
		testHealthCheckFails(t, env)
	})
}

// testApplyChangePrune: a GitRepository is cloned, a Kustomization applies a ConfigMap and a
// Namespace; a new commit changes the ConfigMap and removes the Namespace (pruned); deleting the
// Kustomization prunes the ConfigMap.
func testApplyChangePrune(t *testing.T, env *fluxenv.Env) {
	ctx := t.Context()
	c := env.Client
	ns := newNamespace(t, env, "smoke-prune")
	managedNS := ns + "-managed"

	dir := t.TempDir()
	writeFile(t, dir, "configmap.yaml", configMap(ns, "smoke", "one"))
	writeFile(t, dir, "namespace.yaml", fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", managedNS))
	repo := ns
	sha1, err := env.Git.CreateRepo(repo, dir)
	if err != nil {
		t.Fatal(err)
	}

	gitRepo := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: ns},
		Spec: sourcev1.GitRepositorySpec{
			URL:       env.Git.URL(repo),
			Interval:  metav1.Duration{Duration: 2 * time.Second},
			Timeout:   &metav1.Duration{Duration: 30 * time.Second},
			Reference: &sourcev1.GitRepositoryRef{Branch: fluxenv.DefaultBranch},
		},
	}
	if err := c.Create(ctx, gitRepo); err != nil {
		t.Fatal(err)
	}
	rev1 := fluxenv.DefaultBranch + "@sha1:" + sha1
	waitGitRepository(t, env, ns, "smoke", rev1)

	ks := &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: ns},
		Spec: kustomizev1.KustomizationSpec{
			Interval:      metav1.Duration{Duration: 5 * time.Second},
			RetryInterval: &metav1.Duration{Duration: 2 * time.Second},
			Timeout:       &metav1.Duration{Duration: time.Minute},
			Path:          "./",
			Prune:         true,
			SourceRef:     kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: "smoke"},
		},
	}
	if err := c.Create(ctx, ks); err != nil {
		t.Fatal(err)
	}
	waitKustomizationApplied(t, env, ns, "smoke", rev1)
	expectConfigMapData(t, env, ns, "smoke", "one")
	var managed corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: managedNS}, &managed); err != nil {
		t.Fatalf("namespace %s applied by the Kustomization: %v", managedNS, err)
	}
	if managed.DeletionTimestamp != nil {
		t.Fatalf("namespace %s is being deleted already", managedNS)
	}

	// change the ConfigMap, remove the Namespace
	sha2, err := env.Git.CommitFiles(repo, "change the ConfigMap, drop the Namespace",
		map[string]string{"configmap.yaml": configMap(ns, "smoke", "two")}, "namespace.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rev2 := fluxenv.DefaultBranch + "@sha1:" + sha2
	waitGitRepository(t, env, ns, "smoke", rev2)
	waitKustomizationApplied(t, env, ns, "smoke", rev2)
	expectConfigMapData(t, env, ns, "smoke", "two")

	// The Namespace is pruned: kustomize-controller deletes it. envtest runs only etcd and
	// kube-apiserver, no kube-controller-manager, so nothing runs the namespace controller that
	// would empty the namespace and remove its "kubernetes" finalizer: the deleted Namespace stays
	// in phase Terminating with its deletionTimestamp set, and never disappears. That is what a
	// successful prune looks like here.
	err = fluxenv.WaitFor(ctx, waitTimeout, "namespace "+managedNS+" to be pruned (Terminating)",
		func(ctx context.Context) (bool, string, error) {
			var n corev1.Namespace
			if err := c.Get(ctx, client.ObjectKey{Name: managedNS}, &n); err != nil {
				return false, "", err
			}
			return n.DeletionTimestamp != nil, fmt.Sprintf("phase %s, deletionTimestamp %v", n.Status.Phase, n.DeletionTimestamp), nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Name: managedNS}, &managed); err != nil {
		t.Fatalf("namespace %s: %v", managedNS, err)
	}
	if managed.Status.Phase != corev1.NamespaceTerminating {
		t.Errorf("pruned namespace %s: phase %q, want %q", managedNS, managed.Status.Phase, corev1.NamespaceTerminating)
	}
	t.Logf("pruned namespace %s: phase %s, deletionTimestamp %s, finalizers %v (no namespace controller in envtest)",
		managedNS, managed.Status.Phase, managed.DeletionTimestamp, managed.Spec.Finalizers)

	// deleting the Kustomization prunes what is left (its finalizer deletes the ConfigMap)
	if err := c.Delete(ctx, ks); err != nil {
		t.Fatal(err)
	}
	waitGone(t, env, &kustomizev1.Kustomization{}, ns, "smoke")
	waitGone(t, env, &corev1.ConfigMap{}, ns, "smoke")
}

// testHealthCheckFails: a Kustomization with wait: true applying a Deployment can never become
// Ready, as there is no kube-controller-manager nor kubelet to roll the Deployment out.
func testHealthCheckFails(t *testing.T, env *fluxenv.Env) {
	ctx := t.Context()
	c := env.Client
	ns := newNamespace(t, env, "smoke-health")

	dir := t.TempDir()
	writeFile(t, dir, "deployment.yaml", fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: never-ready
  namespace: %s
spec:
  replicas: 1
  selector:
    matchLabels:
      app: never-ready
  template:
    metadata:
      labels:
        app: never-ready
    spec:
      containers:
        - name: app
          image: registry.invalid/never-ready:1
`, ns))
	repo := ns
	sha, err := env.Git.CreateRepo(repo, dir)
	if err != nil {
		t.Fatal(err)
	}
	gitRepo := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "health", Namespace: ns},
		Spec: sourcev1.GitRepositorySpec{
			URL:       env.Git.URL(repo),
			Interval:  metav1.Duration{Duration: 5 * time.Second},
			Reference: &sourcev1.GitRepositoryRef{Branch: fluxenv.DefaultBranch},
		},
	}
	if err := c.Create(ctx, gitRepo); err != nil {
		t.Fatal(err)
	}
	rev := fluxenv.DefaultBranch + "@sha1:" + sha
	waitGitRepository(t, env, ns, "health", rev)

	ks := &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{Name: "health", Namespace: ns},
		Spec: kustomizev1.KustomizationSpec{
			Interval: metav1.Duration{Duration: time.Minute},
			// the shortest health check timeout kustomize-controller accepts: it raises anything
			// below 30s to 30s (Kustomization.GetTimeout)
			Timeout:   &metav1.Duration{Duration: 30 * time.Second},
			Path:      "./",
			Prune:     true,
			Wait:      true,
			SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.GitRepositoryKind, Name: "health"},
		},
	}
	if err := c.Create(ctx, ks); err != nil {
		t.Fatal(err)
	}
	var got kustomizev1.Kustomization
	err = fluxenv.WaitFor(ctx, waitTimeout, "Kustomization health to fail its health check",
		func(ctx context.Context) (bool, string, error) {
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "health"}, &got); err != nil {
				return false, "", err
			}
			ready := apimeta.FindStatusCondition(got.Status.Conditions, meta.ReadyCondition)
			if ready == nil {
				return false, "no Ready condition", nil
			}
			return ready.Status == metav1.ConditionFalse && ready.Reason == meta.HealthCheckFailedReason,
				conditionString(ready), nil
		})
	if err != nil {
		t.Fatal(err)
	}
	ready := apimeta.FindStatusCondition(got.Status.Conditions, meta.ReadyCondition)
	for _, want := range []string{"health check failed", "timeout", "Deployment/" + ns + "/never-ready"} {
		if !strings.Contains(ready.Message, want) {
			t.Errorf("Ready message %q does not mention %q", ready.Message, want)
		}
	}
	healthy := apimeta.FindStatusCondition(got.Status.Conditions, meta.HealthyCondition)
	if healthy == nil || healthy.Status != metav1.ConditionFalse || healthy.Reason != meta.HealthCheckFailedReason {
		t.Errorf("Healthy condition: %s, want False/%s", conditionString(healthy), meta.HealthCheckFailedReason)
	}
	t.Logf("Kustomization health: %s", conditionString(ready))
	// the Deployment was applied all the same
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "never-ready"}, &appsv1.Deployment{}); err != nil {
		t.Errorf("Deployment never-ready: %v", err)
	}
}

// newNamespace creates a fresh namespace for one test.
func newNamespace(t *testing.T, env *fluxenv.Env, prefix string) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := prefix + "-" + hex.EncodeToString(b)
	if err := env.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

func waitGitRepository(t *testing.T, env *fluxenv.Env, ns, name, revision string) {
	t.Helper()
	err := fluxenv.WaitFor(t.Context(), waitTimeout, fmt.Sprintf("GitRepository %s/%s Ready at %s", ns, name, revision),
		func(ctx context.Context) (bool, string, error) {
			var gr sourcev1.GitRepository
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &gr); err != nil {
				return false, "", err
			}
			ready := apimeta.FindStatusCondition(gr.Status.Conditions, meta.ReadyCondition)
			artifact := "no artifact"
			if gr.Status.Artifact != nil {
				artifact = "artifact " + gr.Status.Artifact.Revision + " " + gr.Status.Artifact.URL
			}
			ok := ready != nil && ready.Status == metav1.ConditionTrue && gr.Status.ObservedGeneration == gr.Generation &&
				gr.Status.Artifact != nil && gr.Status.Artifact.Revision == revision
			return ok, conditionString(ready) + "; " + artifact, nil
		})
	if err != nil {
		t.Fatal(err)
	}
}

func waitKustomizationApplied(t *testing.T, env *fluxenv.Env, ns, name, revision string) {
	t.Helper()
	err := fluxenv.WaitFor(t.Context(), waitTimeout, fmt.Sprintf("Kustomization %s/%s Ready at %s", ns, name, revision),
		func(ctx context.Context) (bool, string, error) {
			var ks kustomizev1.Kustomization
			if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ks); err != nil {
				return false, "", err
			}
			ready := apimeta.FindStatusCondition(ks.Status.Conditions, meta.ReadyCondition)
			ok := ready != nil && ready.Status == metav1.ConditionTrue && ks.Status.LastAppliedRevision == revision
			return ok, conditionString(ready) + "; lastAppliedRevision " + ks.Status.LastAppliedRevision, nil
		})
	if err != nil {
		t.Fatal(err)
	}
}

func expectConfigMapData(t *testing.T, env *fluxenv.Env, ns, name, value string) {
	t.Helper()
	var cm corev1.ConfigMap
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
		t.Fatalf("ConfigMap %s/%s: %v", ns, name, err)
	}
	if got := cm.Data["value"]; got != value {
		t.Fatalf("ConfigMap %s/%s: data.value = %q, want %q", ns, name, got, value)
	}
}

func waitGone(t *testing.T, env *fluxenv.Env, obj client.Object, ns, name string) {
	t.Helper()
	what := fmt.Sprintf("%T %s/%s to be deleted", obj, ns, name)
	err := fluxenv.WaitFor(t.Context(), waitTimeout, what, func(ctx context.Context) (bool, string, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("exists, deletionTimestamp %v, finalizers %v", obj.GetDeletionTimestamp(), obj.GetFinalizers()), nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func configMap(ns, name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  value: %q\n", name, ns, value)
}

func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func conditionString(c *metav1.Condition) string {
	if c == nil {
		return "no condition"
	}
	return fmt.Sprintf("%s=%s (%s): %s", c.Type, c.Status, c.Reason, c.Message)
}
