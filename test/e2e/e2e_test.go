package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// TestGitFlow follows one KCLArtifact through a series of commits: the initial publish and
// apply (case 1), a change (case 2), a removed object (case 3), a broken program and its fix
// (case 5).
func TestGitFlow(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "flow")
	repo := ns
	rev1 := gitRevision(createRepo(t, repo, program{version: "1", extra: true}.files()))
	createGitRepository(t, ns, "app", repo)
	create(t, newKCLArtifact(ns, "app", "app", map[string]string{"env": "staging"}))
	config := func(version string) map[string]string {
		return map[string]string{"env": "staging", "greeting": "hello", "version": version}
	}
	extra := map[string]string{"env": "staging"}

	var art *meta.Artifact // the artifact of the last good revision
	if !t.Run("initial publish and apply", func(t *testing.T) {
		obj := waitKCLArtifactReady(t, ns, "app", rev1)
		art = obj.Status.Artifact
		wantPrefix := fmt.Sprintf("%s/kclartifact/%s/app/", kclController().ArtifactURL(), ns)
		if !strings.HasPrefix(art.URL, wantPrefix) {
			t.Errorf("artifact URL %s, want under %s", art.URL, wantPrefix)
		}
		if got := art.Metadata[originRevisionKey]; got != rev1 {
			t.Errorf("artifact metadata %s = %q, want the Git revision %q", originRevisionKey, got, rev1)
		}
		if ref := obj.Status.ExternalArtifactRef; ref == nil || ref.Name != "app" {
			t.Errorf("status.externalArtifactRef = %+v, want app", ref)
		}
		if ref := obj.Status.KustomizationRef; ref == nil || ref.Name != "app" {
			t.Errorf("status.kustomizationRef = %+v, want app", ref)
		}
		wantInv := []string{"ConfigMap/" + ns + "/app-config", "ConfigMap/" + ns + "/app-extra"}
		if got := inventoryNames(obj); !slices.Equal(got, wantInv) {
			t.Errorf("status.inventory = %v, want %v", got, wantInv)
		}

		ea := getExternalArtifact(t, ns, "app")
		expectSameArtifact(t, ea, art)
		if ready := apimeta.FindStatusCondition(ea.Status.Conditions, meta.ReadyCondition); ready == nil || ready.Status != metav1.ConditionTrue {
			t.Errorf("ExternalArtifact %s/app: %s, want Ready=True", ns, conditionString(ready))
		}
		if ref := ea.Spec.SourceRef; ref == nil || ref.Kind != kclv1.KCLArtifactKind || ref.Name != "app" {
			t.Errorf("ExternalArtifact %s/app: spec.sourceRef = %+v, want the KCLArtifact", ns, ref)
		}

		ks := waitKustomizationApplied(t, ns, "app", art.Revision)
		if ks.Spec.SourceRef.Kind != sourcev1.ExternalArtifactKind || ks.Spec.SourceRef.Name != "app" {
			t.Errorf("generated Kustomization: sourceRef %+v, want ExternalArtifact app", ks.Spec.SourceRef)
		}
		if !ks.Spec.Prune {
			t.Errorf("generated Kustomization: prune is off")
		}
		if owner := metav1.GetControllerOf(ks); owner == nil || owner.Kind != kclv1.KCLArtifactKind || owner.Name != "app" {
			t.Errorf("generated Kustomization: controller %+v, want KCLArtifact app", owner)
		}
		// kustomize-controller v1.9.5 reports the artifact's org.opencontainers.image.revision
		// metadata as the origin revision of what it applied.
		if ks.Status.LastAppliedOriginRevision != rev1 {
			t.Errorf("Kustomization lastAppliedOriginRevision = %q, want the Git revision %q", ks.Status.LastAppliedOriginRevision, rev1)
		}
		waitConfigMap(t, ns, "app-config", config("1"))
		waitConfigMap(t, ns, "app-extra", extra)

		waitFor(t, ns, "KCLArtifact "+ns+"/app KustomizationReady=True", func(ctx context.Context) (bool, string, error) {
			if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, obj); err != nil {
				return false, "", err
			}
			c := apimeta.FindStatusCondition(obj.Status.Conditions, kclv1.KustomizationReadyCondition)
			return c != nil && c.Status == metav1.ConditionTrue, kclArtifactState(obj), nil
		})

		files := expectArtifactServed(t, art)
		expectContainsAll(t, "manifests.yaml of "+art.URL, files["manifests.yaml"], "name: app-config", "name: app-extra", "namespace: "+ns)
		url := latestYAMLURL(ns, "app")
		code, body, err := httpGet(t, url)
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET %s: %d %v", url, code, err)
		}
		expectContainsAll(t, "GET "+url, string(body), "kind: ConfigMap", "name: app-config", "name: app-extra",
			"namespace: "+ns, "greeting: hello", "env: staging")
	}) {
		return
	}

	if !t.Run("commit changes the objects", func(t *testing.T) {
		rev2 := commit(t, repo, "version 2", program{version: "2", extra: true}.files())
		obj := waitKCLArtifactReady(t, ns, "app", rev2)
		if obj.Status.Artifact.Revision == art.Revision {
			t.Fatalf("new Git revision %s published the same artifact revision %s", rev2, art.Revision)
		}
		art = obj.Status.Artifact
		expectSameArtifact(t, getExternalArtifact(t, ns, "app"), art)
		ks := waitKustomizationApplied(t, ns, "app", art.Revision)
		if ks.Status.LastAppliedOriginRevision != rev2 {
			t.Errorf("Kustomization lastAppliedOriginRevision = %q, want %q", ks.Status.LastAppliedOriginRevision, rev2)
		}
		waitConfigMap(t, ns, "app-config", config("2"))
		expectConfigMap(t, ns, "app-extra", extra)
	}) {
		return
	}

	if !t.Run("commit removing an object prunes it", func(t *testing.T) {
		rev3 := commit(t, repo, "version 3 without app-extra", program{version: "3"}.files())
		obj := waitKCLArtifactReady(t, ns, "app", rev3)
		art = obj.Status.Artifact
		if got, want := inventoryNames(obj), []string{"ConfigMap/" + ns + "/app-config"}; !slices.Equal(got, want) {
			t.Errorf("status.inventory = %v, want %v", got, want)
		}
		waitKustomizationApplied(t, ns, "app", art.Revision)
		waitGone(t, &corev1.ConfigMap{}, ns, "app-extra")
		waitConfigMap(t, ns, "app-config", config("3"))
	}) {
		return
	}

	t.Run("broken commit keeps the last good objects, a fix recovers", func(t *testing.T) {
		broken := program{version: "4", broken: true}
		rev4 := commit(t, repo, "broken KCL", broken.files())
		obj := &kclv1.KCLArtifact{}
		var ready *metav1.Condition
		waitFor(t, ns, fmt.Sprintf("KCLArtifact %s/app Ready=False (RenderFailed) at %s", ns, rev4),
			func(ctx context.Context) (bool, string, error) {
				if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, obj); err != nil {
					return false, "", err
				}
				ready = apimeta.FindStatusCondition(obj.Status.Conditions, meta.ReadyCondition)
				ok := ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == kclv1.RenderFailedReason &&
					obj.Status.LastAttemptedRevision == rev4
				return ok, kclArtifactState(obj), nil
			})
		t.Logf("broken commit: %s", conditionString(ready))
		expectContainsAll(t, "Ready message", ready.Message, broken.brokenPosition(), "expected int, got str")
		if strings.Contains(ready.Message, "\x1b[") {
			t.Errorf("Ready message has ANSI escape codes: %q", ready.Message)
		}
		if obj.Status.Artifact == nil || obj.Status.Artifact.Revision != art.Revision {
			t.Errorf("after a failed render: %s, want the last good artifact %s", artifactString(obj.Status.Artifact), art.Revision)
		}
		expectSameArtifact(t, getExternalArtifact(t, ns, "app"), art)
		// kustomize-controller, asked to reconcile, still applies the last good artifact.
		ks := requestKustomizationReconcile(t, ns, "app")
		if ready := apimeta.FindStatusCondition(ks.Status.Conditions, meta.ReadyCondition); ready == nil ||
			ready.Status != metav1.ConditionTrue || ks.Status.LastAppliedRevision != art.Revision {
			t.Errorf("Kustomization after the broken commit: %s, want Ready at %s", kustomizationState(ks), art.Revision)
		}
		expectConfigMap(t, ns, "app-config", config("3"))
		expectArtifactServed(t, art)
		url := latestYAMLURL(ns, "app")
		if code, body, err := httpGet(t, url); err != nil || code != http.StatusOK || !strings.Contains(string(body), `version: "3"`) && !strings.Contains(string(body), `version: '3'`) {
			t.Errorf("GET %s after the broken commit: %d %v, want the last good YAML (version 3):\n%s", url, code, err, body)
		}

		rev5 := commit(t, repo, "fix", program{version: "5"}.files())
		obj = waitKCLArtifactReady(t, ns, "app", rev5)
		// Succeeded, or ArtifactUpToDate when a later reconciliation (the generated Kustomization
		// changing, say) found nothing new to render
		if r := apimeta.FindStatusCondition(obj.Status.Conditions, meta.ReadyCondition); r.Reason != meta.SucceededReason &&
			r.Reason != kclv1.ArtifactUpToDateReason {
			t.Errorf("after the fix: %s, want reason %s or %s", conditionString(r), meta.SucceededReason, kclv1.ArtifactUpToDateReason)
		}
		art = obj.Status.Artifact
		ks = waitKustomizationApplied(t, ns, "app", art.Revision)
		if ks.Status.LastAppliedOriginRevision != rev5 {
			t.Errorf("Kustomization lastAppliedOriginRevision = %q, want %q", ks.Status.LastAppliedOriginRevision, rev5)
		}
		waitConfigMap(t, ns, "app-config", config("5"))
	})
}

// TestArgumentsFromConfigMap (case 4): a change of a watched ConfigMap named by argumentsFrom
// renders and applies again, with no new commit.
func TestArgumentsFromConfigMap(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "args")
	rev := gitRevision(createRepo(t, ns, program{version: "1"}.files()))
	createGitRepository(t, ns, "app", ns)
	args := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kcl-args", Namespace: ns,
			Labels: map[string]string{meta.LabelKeyWatch: meta.LabelValueWatchEnabled}},
		Data: map[string]string{"env": "qa", "greeting": "from a ConfigMap"},
	}
	create(t, args)
	ka := newKCLArtifact(ns, "app", "app", nil)
	ka.Spec.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "ConfigMap", Name: "kcl-args"}}
	create(t, ka)

	obj := waitKCLArtifactReady(t, ns, "app", rev)
	first := obj.Status.Artifact
	waitKustomizationApplied(t, ns, "app", first.Revision)
	waitConfigMap(t, ns, "app-config", map[string]string{"env": "qa", "greeting": "from a ConfigMap", "version": "1"})

	patch := client.MergeFrom(args.DeepCopy())
	args.Data["greeting"] = "changed in the ConfigMap"
	if err := suite.env.Client.Patch(t.Context(), args, patch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ns, "KCLArtifact "+ns+"/app to publish a new artifact after the ConfigMap change",
		func(ctx context.Context) (bool, string, error) {
			if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, obj); err != nil {
				return false, "", err
			}
			ready := apimeta.FindStatusCondition(obj.Status.Conditions, meta.ReadyCondition)
			ok := ready != nil && ready.Status == metav1.ConditionTrue && obj.Status.Artifact != nil &&
				obj.Status.Artifact.Digest != first.Digest
			return ok, kclArtifactState(obj), nil
		})
	if obj.Status.SourceRevision != rev {
		t.Errorf("sourceRevision %q, want the unchanged Git revision %q", obj.Status.SourceRevision, rev)
	}
	waitKustomizationApplied(t, ns, "app", obj.Status.Artifact.Revision)
	waitConfigMap(t, ns, "app-config", map[string]string{"env": "qa", "greeting": "changed in the ConfigMap", "version": "1"})
}

// TestControllerRestartWipedStorage (case 6): the controller restarts with an empty storage
// directory and a new artifact server address (StartKCLController picks new ports); it must
// publish again at the new URL, and kustomize-controller must keep reconciling.
//
// Not parallel: it restarts the controller every test uses, so it runs alone, before the
// parallel tests.
func TestControllerRestartWipedStorage(t *testing.T) {
	ns := newNamespace(t, "restart")
	rev1 := gitRevision(createRepo(t, ns, program{version: "1"}.files()))
	createGitRepository(t, ns, "app", ns)
	create(t, newKCLArtifact(ns, "app", "app", nil))
	data := func(version string) map[string]string {
		return map[string]string{"env": "dev", "greeting": "hello", "version": version}
	}
	obj := waitKCLArtifactReady(t, ns, "app", rev1)
	before := obj.Status.Artifact
	waitKustomizationApplied(t, ns, "app", before.Revision)
	waitConfigMap(t, ns, "app-config", data("1"))

	old := kclController()
	stopped := time.Now()
	c := restartController(t, "", func() {
		if err := os.RemoveAll(old.StorageDir); err != nil {
			t.Fatal(err)
		}
		if code, _, err := httpGet(t, before.URL); err == nil {
			t.Errorf("GET %s with the controller stopped: %d, want no answer", before.URL, code)
		}
	})
	t.Logf("restarted with wiped storage in %s; artifact server %s -> %s",
		time.Since(stopped).Round(time.Millisecond), old.ArtifactURL(), c.ArtifactURL())

	newPrefix := fmt.Sprintf("%s/kclartifact/%s/app/", c.ArtifactURL(), ns)
	waitFor(t, ns, fmt.Sprintf("KCLArtifact %s/app to publish again at %s", ns, newPrefix),
		func(ctx context.Context) (bool, string, error) {
			if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, obj); err != nil {
				return false, "", err
			}
			ready := apimeta.FindStatusCondition(obj.Status.Conditions, meta.ReadyCondition)
			ok := ready != nil && ready.Status == metav1.ConditionTrue && obj.Status.Artifact != nil &&
				strings.HasPrefix(obj.Status.Artifact.URL, newPrefix)
			return ok, kclArtifactState(obj), nil
		})
	after := obj.Status.Artifact
	if after.Digest != before.Digest {
		t.Errorf("the same inputs rendered a different artifact after the restart: %s, before %s", after.Digest, before.Digest)
	}
	expectSameArtifact(t, getExternalArtifact(t, ns, "app"), after)
	expectArtifactServed(t, after)
	if code, _, err := httpGet(t, latestYAMLURL(ns, "app")); err != nil || code != http.StatusOK {
		t.Errorf("GET %s: %d %v", latestYAMLURL(ns, "app"), code, err)
	}

	// kustomize-controller downloads from the new URL.
	ks := requestKustomizationReconcile(t, ns, "app")
	if ready := apimeta.FindStatusCondition(ks.Status.Conditions, meta.ReadyCondition); ready == nil || ready.Status != metav1.ConditionTrue {
		t.Errorf("Kustomization after the restart: %s, want Ready", kustomizationState(ks))
	}
	rev2 := commit(t, ns, "version 2 after the restart", program{version: "2"}.files())
	obj = waitKCLArtifactReady(t, ns, "app", rev2)
	waitKustomizationApplied(t, ns, "app", obj.Status.Artifact.Revision)
	waitConfigMap(t, ns, "app-config", data("2"))
}

// TestTwoKCLArtifactsOneSource (case 7): two KCLArtifacts render one GitRepository with
// different arguments into two sets of objects, and both follow a commit.
func TestTwoKCLArtifactsOneSource(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "two")
	rev1 := gitRevision(createRepo(t, ns, program{version: "1"}.files()))
	createGitRepository(t, ns, "app", ns)
	colours := []string{"blue", "green"}
	for _, c := range colours {
		create(t, newKCLArtifact(ns, c, "app", map[string]string{"name": c, "env": c}))
	}
	apply := func(rev, version string) {
		t.Helper()
		digests := map[string]string{}
		for _, c := range colours {
			obj := waitKCLArtifactReady(t, ns, c, rev)
			digests[obj.Status.Artifact.Digest] = c
			expectSameArtifact(t, getExternalArtifact(t, ns, c), obj.Status.Artifact)
			waitKustomizationApplied(t, ns, c, obj.Status.Artifact.Revision)
			waitConfigMap(t, ns, c+"-config", map[string]string{"env": c, "greeting": "hello", "version": version})
		}
		if len(digests) != len(colours) {
			t.Errorf("two KCLArtifacts with different arguments published the same artifact: %v", digests)
		}
	}
	apply(rev1, "1")
	rev2 := commit(t, ns, "version 2", program{version: "2"}.files())
	apply(rev2, "2")
	var list kustomizev1.KustomizationList
	if err := suite.env.Client.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 {
		t.Errorf("%d Kustomizations in %s, want 2", len(list.Items), ns)
	}
}

// TestUserKustomization (case 8): with generation disabled, the ExternalArtifact is published
// for a Kustomization of the user's own, which applies it.
func TestUserKustomization(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "user")
	rev1 := gitRevision(createRepo(t, ns, program{version: "1"}.files()))
	createGitRepository(t, ns, "app", ns)
	ka := newKCLArtifact(ns, "rendered", "app", nil)
	ka.Spec.Kustomization = &kclv1.KustomizationTemplate{Disabled: true}
	create(t, ka)
	obj := waitKCLArtifactReady(t, ns, "rendered", rev1)
	expectSameArtifact(t, getExternalArtifact(t, ns, "rendered"), obj.Status.Artifact)

	create(t, &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns},
		Spec: kustomizev1.KustomizationSpec{
			SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.ExternalArtifactKind, Name: "rendered"},
			Path:      "./",
			Prune:     true,
			Interval:  metav1.Duration{Duration: time.Minute},
			// the user's own customisation, composed with the rendered objects
			CommonMetadata: &kustomizev1.CommonMetadata{Labels: map[string]string{"team": "e2e"}},
		},
	})
	ks := waitKustomizationApplied(t, ns, "mine", obj.Status.Artifact.Revision)
	if ks.Status.LastAppliedOriginRevision != rev1 {
		t.Errorf("Kustomization mine: lastAppliedOriginRevision %q, want %q", ks.Status.LastAppliedOriginRevision, rev1)
	}
	data := map[string]string{"env": "dev", "greeting": "hello", "version": "1"}
	waitConfigMap(t, ns, "app-config", data)
	var cm corev1.ConfigMap
	if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "app-config"}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Labels["team"] != "e2e" {
		t.Errorf("ConfigMap app-config: labels %v, want the user Kustomization's team=e2e", cm.Labels)
	}

	// nothing was generated
	if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "rendered"}, obj); err != nil {
		t.Fatal(err)
	}
	if obj.Status.KustomizationRef != nil {
		t.Errorf("status.kustomizationRef = %+v with generation disabled", obj.Status.KustomizationRef)
	}
	if c := apimeta.FindStatusCondition(obj.Status.Conditions, kclv1.KustomizationReadyCondition); c != nil {
		t.Errorf("KustomizationReady condition with generation disabled: %s", conditionString(c))
	}
	expectGone(t, &kustomizev1.Kustomization{}, ns, "rendered")
	var list kustomizev1.KustomizationList
	if err := suite.env.Client.List(t.Context(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "mine" {
		var names []string
		for _, k := range list.Items {
			names = append(names, k.Name)
		}
		t.Errorf("Kustomizations in %s: %v, want only the user's (mine)", ns, names)
	}

	// a commit reaches the cluster through the user's Kustomization
	rev2 := commit(t, ns, "version 2", program{version: "2"}.files())
	obj = waitKCLArtifactReady(t, ns, "rendered", rev2)
	waitKustomizationApplied(t, ns, "mine", obj.Status.Artifact.Revision)
	data["version"] = "2"
	waitConfigMap(t, ns, "app-config", data)
	expectGone(t, &kustomizev1.Kustomization{}, ns, "rendered")
}

// TestDeleteKCLArtifact (case 9): deleting a KCLArtifact deletes its generated Kustomization
// (whose finalizer prunes the objects), its ExternalArtifact and its stored artifacts.
func TestDeleteKCLArtifact(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "delete")
	rev := gitRevision(createRepo(t, ns, program{version: "1", extra: true}.files()))
	createGitRepository(t, ns, "app", ns)
	ka := newKCLArtifact(ns, "app", "app", nil)
	create(t, ka)
	obj := waitKCLArtifactReady(t, ns, "app", rev)
	art := obj.Status.Artifact
	waitKustomizationApplied(t, ns, "app", art.Revision)
	waitConfigMap(t, ns, "app-config", map[string]string{"env": "dev", "greeting": "hello", "version": "1"})
	waitConfigMap(t, ns, "app-extra", map[string]string{"env": "dev"})
	expectArtifactServed(t, art)
	latest := latestYAMLURL(ns, "app")
	if code, _, err := httpGet(t, latest); err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v", latest, code, err)
	}

	if err := suite.env.Client.Delete(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	waitGone(t, &kclv1.KCLArtifact{}, ns, "app")
	waitGone(t, &kustomizev1.Kustomization{}, ns, "app")
	waitGone(t, &sourcev1.ExternalArtifact{}, ns, "app")
	waitGone(t, &corev1.ConfigMap{}, ns, "app-config")
	waitGone(t, &corev1.ConfigMap{}, ns, "app-extra")
	for _, url := range []string{art.URL, latest} {
		if code, _, err := httpGet(t, url); err != nil || code != http.StatusNotFound {
			t.Errorf("GET %s after the deletion: %d %v, want 404", url, code, err)
		}
	}
	// the source is not the KCLArtifact's to delete
	if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "app"}, &sourcev1.GitRepository{}); err != nil {
		t.Errorf("GitRepository %s/app after the deletion: %v", ns, err)
	}
	// Once the finalizer is removed the object is gone: the final status patch meets NotFound,
	// which is expected (Flux's controllers filter it out), not a reconciliation error.
	for _, line := range grepLines(kclController().LogPath, `"namespace": "`+ns+`"`) {
		if strings.Contains(line, "Reconciler error") {
			t.Errorf("the deletion of KCLArtifact %s/app ended in a reconciliation error:\n%s", ns, line)
		}
	}
}
