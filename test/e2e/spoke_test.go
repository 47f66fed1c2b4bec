package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// stageProgram renders ConfigMap web-config in option("namespace") with the stage's message, and
// the Namespace itself when option("createNamespace") (a spoke has none of the hub's).
const stageProgram = `_ns = option("namespace", type="str", required=True)
_message = option("message", type="str", required=True)
_own = option("createNamespace", type="bool", default=False)
_cm = {
    apiVersion = "v1"
    kind = "ConfigMap"
    metadata = {name = "web-config", namespace = _ns}
    data = {message = _message, version = "%s"}
}
_nsObj = {apiVersion = "v1", kind = "Namespace", metadata.name = _ns}
items = [_nsObj, _cm] if _own else [_cm]
`

// spokeSoak is production's soak: short, the test measures what follows the gate.
const spokeSoak = 2 * time.Second

func stageFiles(version string) map[string]string {
	return map[string]string{"main.k": fmt.Sprintf(stageProgram, version)}
}

// newStage is a KCLArtifact of source "app" that waits for its objects (kustomize-controller's
// health checks, wherever it applies), with message as its own argument.
func newStage(ns, name, message string, args map[string]string) *kclv1.KCLArtifact {
	a := map[string]string{"message": message}
	maps.Copy(a, args)
	obj := newKCLArtifact(ns, name, "app", a)
	obj.Spec.Kustomization = &kclv1.KustomizationTemplate{Wait: true, Timeout: &metav1.Duration{Duration: 30 * time.Second}}
	return obj
}

// newSpokeStage is a stage following staging, applying to the cluster of the kubeconfig in Secret
// secret, into namespace target, which its program creates there.
func newSpokeStage(ns, name, target, secret string) *kclv1.KCLArtifact {
	obj := newStage(ns, name, name, map[string]string{"namespace": target, "createNamespace": "True"})
	obj.Spec.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "staging"},
		Soak: &metav1.Duration{Duration: spokeSoak}}
	obj.Spec.Kustomization.KubeConfig = &meta.KubeConfigReference{SecretRef: &meta.SecretKeyReference{Name: secret}}
	return obj
}

// TestHubAndSpoke: both stages are KCLArtifacts in the hub; staging applies to the hub,
// production, through its Kustomization's kubeConfig, to a second kube-apiserver (the spoke).
// Production publishes nothing until the hub's staging ran the same commit healthy for the
// soak; then its own rendering (its own message) is applied in the spoke, never in the hub, and
// kustomize-controller's health checks in the spoke make it Healthy. A second commit flows the
// same way. A stage whose kubeconfig Secret is missing says so and leaves staging alone; the
// Secret written, it applies too. Deleting the stages prunes what they applied in the spoke.
func TestHubAndSpoke(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "hubspoke")
	spoke, err := suite.env.StartSpoke(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := spoke.Stop(); err != nil {
			t.Error(err)
		}
	})
	if err := spoke.WriteKubeConfigSecret(t.Context(), suite.env.Client, ns, "spoke-kubeconfig"); err != nil {
		t.Fatal(err)
	}
	prodNs, euNs := ns+"-production", ns+"-production-eu"

	rev1 := gitRevision(createRepo(t, ns, stageFiles("1")))
	createGitRepository(t, ns, "app", ns)
	// staging starts suspended: production renders ahead and must wait for it
	staging := newStage(ns, "staging", "staging", nil)
	staging.Spec.Suspend = true
	create(t, staging)
	create(t, newSpokeStage(ns, "production", prodNs, "spoke-kubeconfig"))
	// its Secret is written only later: the negative case
	create(t, newSpokeStage(ns, "production-eu", euNs, "production-eu-kubeconfig"))

	for _, name := range []string{"production", "production-eu"} {
		expectHeldBack(t, ns, name, rev1)
	}
	expectNotInCluster(t, spoke.Client, "the spoke", prodNs, "web-config")
	// rendered once each, ahead; a reconcile while waiting renders nothing
	expectRenders(t, ns, 2, "production and production-eu rendering the first commit ahead")
	token := annotateReconcile(t, &kclv1.KCLArtifact{}, ns, "production")
	waitStage(t, ns, "production", "to handle reconcile request "+token, func(o *kclv1.KCLArtifact) bool {
		return o.Status.LastHandledReconcileAt == token
	})
	expectRenders(t, ns, 2, "a reconcile of production while it waits")

	patchKCLArtifact(t, ns, "staging", `{"spec":{"suspend":false}}`)
	st := waitStageHealthy(t, ns, "staging", rev1)
	gateOpen := time.Now().Add(spokeSoak) // staging seen healthy (≤250ms late), plus the soak
	ks := waitStageApplied(t, ns, "production", rev1)
	t.Logf("figure: staging healthy + %s soak -> production's Kustomization Ready in the spoke: %s (from staging's recorded healthyAt, second precision: %s)",
		spokeSoak, time.Since(gateOpen).Round(100*time.Millisecond),
		time.Since(st.Status.History[0].HealthyAt.Add(spokeSoak)).Round(100*time.Millisecond))
	prod := waitStageHealthy(t, ns, "production", rev1)
	expectPromotedFrom(t, prod, st)
	expectAppliedInSpoke(t, ns, spoke, ks, prodNs, "production", "1")
	waitConfigMap(t, ns, "web-config", map[string]string{"message": "staging", "version": "1"})
	expectNotInCluster(t, spoke.Client, "the spoke", ns, "web-config")

	// the missing kubeconfig Secret: production-eu is published and says why it is not applied
	eu := expectMissingKubeConfig(t, ns, "production-eu", "production-eu-kubeconfig")
	expectPromotedFrom(t, eu, st)
	expectUnaffected(t, ns, "staging", st.Status.Artifact)
	expectNotInCluster(t, spoke.Client, "the spoke", euNs, "web-config")
	if err := spoke.WriteKubeConfigSecret(t.Context(), suite.env.Client, ns, "production-eu-kubeconfig"); err != nil {
		t.Fatal(err)
	}
	expectAppliedInSpoke(t, ns, spoke, waitStageApplied(t, ns, "production-eu", rev1), euNs, "production-eu", "1")
	if eu2 := waitStageHealthy(t, ns, "production-eu", rev1); eu2.Status.Artifact.Digest != eu.Status.Artifact.Digest {
		t.Errorf("production-eu: %s once its Secret was written, want the artifact it had published, %s",
			artifactString(eu2.Status.Artifact), artifactString(eu.Status.Artifact))
	}
	expectRenders(t, ns, 3, "the first commit in three stages")

	// a new commit flows the same way
	rev2 := commit(t, ns, "version 2", stageFiles("2"))
	st2 := waitStageHealthy(t, ns, "staging", rev2)
	gateOpen = time.Now().Add(spokeSoak)
	ks = waitStageApplied(t, ns, "production", rev2)
	t.Logf("figure: second commit, staging healthy + %s soak -> production's Kustomization Ready in the spoke: %s",
		spokeSoak, time.Since(gateOpen).Round(100*time.Millisecond))
	prod2 := waitStageHealthy(t, ns, "production", rev2)
	if prod2.Status.Artifact.Digest == prod.Status.Artifact.Digest {
		t.Errorf("production still serves %s after the second commit", prod.Status.Artifact.Revision)
	}
	expectPromotedFrom(t, prod2, st2)
	expectAppliedInSpoke(t, ns, spoke, ks, prodNs, "production", "2")
	waitConfigMap(t, ns, "web-config", map[string]string{"message": "staging", "version": "2"})
	waitStageHealthy(t, ns, "production-eu", rev2)
	expectRenders(t, ns, 6, "two commits in three stages")

	// deleting a stage prunes what it applied in the spoke, through the same kubeConfig
	for _, name := range []string{"production", "production-eu"} {
		if err := suite.env.Client.Delete(t.Context(), &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, target := range []string{prodNs, euNs} {
		waitSpokeGone(t, ns, spoke, target, "web-config")
	}
}

// expectHeldBack waits until the stage rendered sourceRevision ahead and holds it (one waiting
// artifact, Promoted False because staging has not run it) and checks it published nothing.
func expectHeldBack(t *testing.T, ns, name, sourceRevision string) {
	t.Helper()
	obj := waitStage(t, ns, name, "one artifact of "+sourceRevision+" waiting for staging", func(o *kclv1.KCLArtifact) bool {
		p := apimeta.FindStatusCondition(o.Status.Conditions, kclv1.PromotedCondition)
		return o.Status.Promotion != nil && len(o.Status.Promotion.Waiting) == 1 &&
			o.Status.Promotion.Waiting[0].SourceRevision == sourceRevision &&
			p != nil && p.Status == metav1.ConditionFalse
	})
	if r := conditionReason(obj, kclv1.PromotedCondition); r != kclv1.UpstreamNotHealthyReason {
		t.Errorf("%s: Promoted reason %s, want %s", name, r, kclv1.UpstreamNotHealthyReason)
	}
	if g := gate(obj.Status.Promotion.Waiting[0], kclv1.GateUpstream); g == nil || g.Open {
		t.Errorf("%s: upstream gate %+v, want closed", name, g)
	}
	if obj.Status.Artifact != nil || len(obj.Status.History) != 0 {
		t.Errorf("%s published before staging ran the commit: %s, %d history entries", name, artifactString(obj.Status.Artifact), len(obj.Status.History))
	}
	expectGone(t, &sourcev1.ExternalArtifact{}, ns, name)
	expectGone(t, &kustomizev1.Kustomization{}, ns, name)
}

// expectRenders checks the controller's count of renders in namespace ns.
func expectRenders(t *testing.T, ns string, want int, what string) {
	t.Helper()
	if got := rendersOf(t, ns); got != want {
		t.Errorf("renders after %s: %d, want %d", what, got, want)
	}
}

func gate(w kclv1.WaitingArtifact, name string) *kclv1.GateStatus {
	for i := range w.Gates {
		if w.Gates[i].Name == name {
			return &w.Gates[i]
		}
	}
	return nil
}

// expectPromotedFrom checks the stage's current artifact was published from staging's healthy
// artifact st, read in the hub, no earlier than the soak allowed.
func expectPromotedFrom(t *testing.T, obj, st *kclv1.KCLArtifact) {
	t.Helper()
	cur, up := obj.Status.History[0], st.Status.History[0]
	p := cur.Promotion
	if p == nil || p.Upstream != "staging" || p.UpstreamRevision != up.Revision ||
		p.HealthySince == nil || !p.HealthySince.Equal(up.HealthyAt) {
		t.Errorf("%s: history[0].promotion %+v, want staging's %s healthy since %v", obj.Name, p, up.Revision, up.HealthyAt)
	}
	// the API's times have second precision: healthyAt may be up to 1s earlier than it was
	if earliest := up.HealthyAt.Add(spokeSoak - time.Second); cur.LastPublished.Time.Before(earliest) {
		t.Errorf("%s: published at %v, before staging's healthyAt %v + soak %s", obj.Name, cur.LastPublished, up.HealthyAt, spokeSoak)
	}
	if c := apimeta.FindStatusCondition(obj.Status.Conditions, kclv1.PromotedCondition); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("%s: %s once published, want True", obj.Name, conditionString(c))
	}
}

// expectAppliedInSpoke checks that the Kustomization applied the stage's own rendering
// (message) in the spoke's namespace target, and nothing of it in the hub.
func expectAppliedInSpoke(t *testing.T, ns string, spoke *fluxenv.Spoke, ks *kustomizev1.Kustomization, target, message, version string) {
	t.Helper()
	want := map[string]string{"message": message, "version": version}
	waitFor(t, ns, fmt.Sprintf("ConfigMap %s/web-config with %v in the spoke", target, want), func(ctx context.Context) (bool, string, error) {
		var cm corev1.ConfigMap
		err := spoke.Client.Get(ctx, client.ObjectKey{Namespace: target, Name: "web-config"}, &cm)
		if apierrors.IsNotFound(err) {
			return false, "not found in the spoke; " + kustomizationState(ks), nil
		}
		if err != nil {
			return false, "", err
		}
		return maps.Equal(cm.Data, want), fmt.Sprintf("data %v", cm.Data), nil
	})
	expectNotInCluster(t, suite.env.Client, "the hub", target, "web-config")
	if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Name: target}, &corev1.Namespace{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s in the hub: want NotFound, got %v", target, err)
	}
	if ks.Spec.KubeConfig == nil || ks.Spec.KubeConfig.SecretRef == nil {
		t.Errorf("Kustomization %s has no kubeConfig.secretRef", ks.Name)
	}
	ids := []string{}
	if ks.Status.Inventory != nil {
		for _, e := range ks.Status.Inventory.Entries {
			ids = append(ids, e.ID)
		}
	}
	if !strings.Contains(strings.Join(ids, " "), target+"_web-config__ConfigMap") {
		t.Errorf("Kustomization %s inventory %v lacks the ConfigMap in %s", ks.Name, ids, target)
	}
}

// expectMissingKubeConfig waits until the stage published, its Kustomization cannot read the
// kubeconfig Secret, and the KCLArtifact's KustomizationReady says so.
func expectMissingKubeConfig(t *testing.T, ns, name, secret string) *kclv1.KCLArtifact {
	t.Helper()
	ks := &kustomizev1.Kustomization{}
	waitFor(t, ns, "Kustomization "+name+" failing on its kubeconfig Secret", func(ctx context.Context) (bool, string, error) {
		if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ks); err != nil {
			return false, "", err
		}
		c := apimeta.FindStatusCondition(ks.Status.Conditions, meta.ReadyCondition)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, secret), kustomizationState(ks), nil
	})
	obj := waitStage(t, ns, name, "KustomizationReady False naming "+secret, func(o *kclv1.KCLArtifact) bool {
		c := apimeta.FindStatusCondition(o.Status.Conditions, kclv1.KustomizationReadyCondition)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, secret) && len(o.Status.History) > 0
	})
	t.Logf("%s: %s; history[0] %s", name, conditionString(apimeta.FindStatusCondition(obj.Status.Conditions, kclv1.KustomizationReadyCondition)),
		obj.Status.History[0].Health)
	if h := obj.Status.History[0].Health; h == kclv1.HealthHealthy {
		t.Errorf("%s: history[0] %s although its Kustomization never applied", name, h)
	}
	return obj
}

// expectUnaffected checks the stage still serves want, applied, Ready and Healthy.
func expectUnaffected(t *testing.T, ns, name string, want *meta.Artifact) {
	t.Helper()
	obj := getStage(t, ns, name)
	ok := obj.Status.Artifact != nil && obj.Status.Artifact.Digest == want.Digest &&
		apimeta.IsStatusConditionTrue(obj.Status.Conditions, meta.ReadyCondition) &&
		apimeta.IsStatusConditionTrue(obj.Status.Conditions, kclv1.KustomizationReadyCondition) &&
		len(obj.Status.History) > 0 && obj.Status.History[0].Health == kclv1.HealthHealthy
	if !ok {
		t.Errorf("%s affected: %s", name, stageState(obj))
	}
}

func expectNotInCluster(t *testing.T, c client.Client, cluster, ns, name string) {
	t.Helper()
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap %s/%s in %s: want NotFound, got %v", ns, name, cluster, err)
	}
}

func waitSpokeGone(t *testing.T, ns string, spoke *fluxenv.Spoke, target, name string) {
	t.Helper()
	waitFor(t, ns, fmt.Sprintf("ConfigMap %s/%s pruned from the spoke", target, name), func(ctx context.Context) (bool, string, error) {
		err := spoke.Client.Get(ctx, client.ObjectKey{Namespace: target, Name: name}, &corev1.ConfigMap{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still there", err
	})
}

// waitStageApplied waits until the stage serves an artifact of sourceRevision and its
// Kustomization is Ready having applied it, and returns the Kustomization.
func waitStageApplied(t *testing.T, ns, name, sourceRevision string) *kustomizev1.Kustomization {
	t.Helper()
	ks := &kustomizev1.Kustomization{}
	waitFor(t, ns, fmt.Sprintf("Kustomization %s Ready having applied %s's artifact of %s", name, name, sourceRevision),
		func(ctx context.Context) (bool, string, error) {
			obj := &kclv1.KCLArtifact{}
			if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
				return false, "", err
			}
			// the published artifact's origin: status.sourceRevision may be a waiting one's
			if obj.Status.Artifact == nil || obj.Status.Artifact.Metadata[originRevisionKey] != sourceRevision {
				return false, stageState(obj), nil
			}
			if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ks); err != nil {
				return false, "", err
			}
			ok := apimeta.IsStatusConditionTrue(ks.Status.Conditions, meta.ReadyCondition) &&
				ks.Status.LastAppliedRevision == obj.Status.Artifact.Revision
			return ok, kustomizationState(ks), nil
		})
	return ks
}

// waitStageHealthy waits until the stage serves an artifact of sourceRevision whose history
// entry is Healthy.
func waitStageHealthy(t *testing.T, ns, name, sourceRevision string) *kclv1.KCLArtifact {
	t.Helper()
	return waitStage(t, ns, name, "an artifact of "+sourceRevision+" Healthy", func(o *kclv1.KCLArtifact) bool {
		return o.Status.Artifact != nil && len(o.Status.History) > 0 && o.Status.History[0].Digest == o.Status.Artifact.Digest &&
			o.Status.History[0].SourceRevision == sourceRevision && o.Status.History[0].Health == kclv1.HealthHealthy &&
			o.Status.History[0].HealthyAt != nil
	})
}

func getStage(t *testing.T, ns, name string) *kclv1.KCLArtifact {
	t.Helper()
	obj := &kclv1.KCLArtifact{}
	if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func waitStage(t *testing.T, ns, name, what string, ok func(*kclv1.KCLArtifact) bool) *kclv1.KCLArtifact {
	t.Helper()
	obj := &kclv1.KCLArtifact{}
	waitFor(t, ns, name+": "+what, func(ctx context.Context) (bool, string, error) {
		if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return false, "", err
		}
		return ok(obj), stageState(obj), nil
	})
	return obj
}

// stageState adds the promotion and the newest history entry to kclArtifactState.
func stageState(obj *kclv1.KCLArtifact) string {
	s := kclArtifactState(obj) + "; " + conditionString(apimeta.FindStatusCondition(obj.Status.Conditions, kclv1.PromotedCondition))
	if p := obj.Status.Promotion; p != nil {
		for _, w := range p.Waiting {
			s += fmt.Sprintf("; waiting %s of %s gates %+v", w.Digest, w.SourceRevision, w.Gates)
		}
	}
	if len(obj.Status.History) > 0 {
		h := obj.Status.History[0]
		s += fmt.Sprintf("; history[0] %s of %s %s healthyAt %v", h.Digest, h.SourceRevision, h.Health, h.HealthyAt)
	}
	return s
}
