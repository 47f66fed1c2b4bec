package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// TestEventsDoNotHoldReconciles: two spec changes 2 s apart are both published, and the second
// answered, as fast with an events address that nothing answers (notification-controller is not
// installed here) as without one: events are posted off the reconcile.
func TestEventsDoNotHoldReconciles(t *testing.T) {
	ns := newNamespace(t, "events")
	createRepo(t, ns, "events", "node-app", map[string]string{"kcl.yaml": settingsFile(map[string]any{"replicas": 1})})
	create(t, kclArtifact(ns, "app", "events", func(o *kclv1.KCLArtifact) {
		o.Spec.Settings = []string{"kcl.yaml"}
		o.Spec.Arguments = map[string]string{"message": "e0"}
		o.Spec.Kustomization = &kclv1.KustomizationTemplate{TargetNamespace: ns}
	}))
	waitAnswers(t, ns, "e0", "")

	twoChanges := func(t *testing.T, label string) {
		before, err := getKCLArtifact(context.Background(), ns, "app")
		if err != nil {
			t.Fatal(err)
		}
		patchSpec(t, ns, "app", fmt.Sprintf(`{"arguments":{"message":%q}}`, label+"-1"))
		// the user's pause between the two changes, not a wait for anything
		time.Sleep(2 * time.Second)
		patchSpec(t, ns, "app", fmt.Sprintf(`{"arguments":{"message":%q}}`, label+"-2"))
		began := time.Now()
		waitAnswers(t, ns, label+"-2", "")
		figure("events: "+label+": second change to answering", time.Since(began))
		// both published: two entries the history did not have (it keeps a bounded number)
		known := map[string]bool{}
		for _, e := range before.Status.History {
			known[e.Digest] = true
		}
		waitFor(t, "both changes published", func(ctx context.Context) (bool, string, error) {
			obj, err := getKCLArtifact(ctx, ns, "app")
			if err != nil {
				return false, "", err
			}
			added := 0
			for _, e := range obj.Status.History {
				if !known[e.Digest] {
					added++
				}
			}
			return added >= 2, historyOf(obj), nil
		})
	}
	t.Run("no events address", func(t *testing.T) { twoChanges(t, "quiet") })

	t.Run("an events address nothing answers", func(t *testing.T) {
		ctx := context.Background()
		suite.install.KeepEventsAddr = true
		t.Cleanup(func() {
			suite.install.KeepEventsAddr = false
			if err := suite.install.ControllerFrom(ctx, "config/default", controllerImage); err != nil {
				t.Error(err)
			}
		})
		if err := suite.install.ControllerFrom(ctx, "config/default", controllerImage); err != nil {
			t.Fatal(err)
		}
		pod, err := controllerPod(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if args := strings.Join(pod.Spec.Containers[0].Args, " "); !strings.Contains(args, "--events-addr=http://notification-controller.") {
			t.Fatalf("the controller does not post events to notification-controller's address: %s", args)
		}
		// the new Pod's first render starts a worker: warmed as the first controller was by
		// the KCLArtifact's creation, so that both measures start warm
		patchSpec(t, ns, "app", `{"arguments":{"message":"warm"}}`)
		waitAnswers(t, ns, "warm", "")
		twoChanges(t, "dead")
	})
}
