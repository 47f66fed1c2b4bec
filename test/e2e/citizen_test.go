package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// shardKey is Flux's sharding label; the suite's controller handles the objects without it.
const shardKey = "sharding.fluxcd.io/key"

func getDeployment(t *testing.T, ns, name string) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatalf("Deployment %s/%s: %v", ns, name, err)
	}
	return &d
}

func patchKCLArtifact(t *testing.T, ns, name, patch string) {
	t.Helper()
	obj := &kclv1.KCLArtifact{}
	obj.SetNamespace(ns)
	obj.SetName(name)
	if err := suite.env.Client.Patch(t.Context(), obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("patching KCLArtifact %s/%s with %s: %v", ns, name, patch, err)
	}
}

// Turning generation off hands the workloads over instead of deleting them: kustomize-controller
// finalizes the generated Kustomization without pruning, and the user's own Kustomization on the
// ExternalArtifact adopts the very same objects.
func TestOptOutOrphansTheWorkloads(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "optout")
	rev := gitRevision(createRepo(t, ns, program{version: "1", deployment: true}.files()))
	createGitRepository(t, ns, "app", ns)
	create(t, newKCLArtifact(ns, "app", "app", nil))
	obj := waitKCLArtifactReady(t, ns, "app", rev)
	waitKustomizationApplied(t, ns, "app", obj.Status.Artifact.Revision)
	before := getDeployment(t, ns, "app-web")

	patchKCLArtifact(t, ns, "app", `{"spec":{"kustomization":{"disabled":true}}}`)
	// gone means kustomize-controller's finalizer has run: it would have pruned by now
	waitGone(t, &kustomizev1.Kustomization{}, ns, "app")
	after := getDeployment(t, ns, "app-web")
	if after.UID != before.UID || after.DeletionTimestamp != nil {
		t.Fatalf("Deployment app-web was pruned by the opt-out: uid %s → %s, deletionTimestamp %v",
			before.UID, after.UID, after.DeletionTimestamp)
	}
	expectConfigMap(t, ns, "app-config", map[string]string{"env": "dev", "greeting": "hello", "version": "1"})

	create(t, &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{Name: "mine", Namespace: ns},
		Spec: kustomizev1.KustomizationSpec{
			SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.ExternalArtifactKind, Name: "app"},
			Path:      "./", Prune: true, Interval: metav1.Duration{Duration: time.Minute},
		},
	})
	waitKustomizationApplied(t, ns, "mine", obj.Status.Artifact.Revision)
	adopted := getDeployment(t, ns, "app-web")
	if adopted.UID != before.UID {
		t.Errorf("Deployment app-web was recreated (uid %s → %s), not adopted", before.UID, adopted.UID)
	}
	if got := adopted.Labels["kustomize.toolkit.fluxcd.io/name"]; got != "mine" {
		t.Errorf("Deployment app-web: kustomize.toolkit.fluxcd.io/name=%q, want the user's Kustomization mine", got)
	}
}

// Two instances split the KCLArtifacts by Flux's sharding label, each with its own lease,
// storage and artifact server: each KCLArtifact is rendered by exactly one of them, and the
// generated objects carry the key so that a sharded kustomize-controller finds them.
func TestShards(t *testing.T) {
	t.Parallel()
	shard, err := suite.env.StartKCLController(t.Context(), fluxenv.KCLControllerOptions{
		Binary: suite.binary, Name: controllerName + "-shard1", ServiceAccount: suite.install.serviceAccount(),
		Args: []string{"--enable-leader-election", "--watch-label-selector=" + shardKey + "=shard1"},
	})
	if err != nil {
		t.Fatalf("starting the shard: %v", err)
	}
	t.Cleanup(func() { _ = suite.env.StopKCLController(shard) })

	ns := newNamespace(t, "shards")
	rev := gitRevision(createRepo(t, ns, program{version: "1"}.files()))
	createGitRepository(t, ns, "app", ns)
	mainObj := newKCLArtifact(ns, "main", "app", map[string]string{"name": "main"})
	sharded := newKCLArtifact(ns, "sharded", "app", map[string]string{"name": "sharded"})
	sharded.Labels = map[string]string{shardKey: "shard1"}
	create(t, mainObj)
	create(t, sharded)

	for name, c := range map[string]*fluxenv.KCLController{"main": kclController(), "sharded": shard} {
		obj := waitKCLArtifactReady(t, ns, name, rev)
		if !strings.HasPrefix(obj.Status.Artifact.URL, c.ArtifactURL()+"/") {
			t.Errorf("KCLArtifact %s: artifact %s not served by the instance of its shard (%s)", name, obj.Status.Artifact.URL, c.ArtifactURL())
		}
		waitKustomizationApplied(t, ns, name, obj.Status.Artifact.Revision)
	}
	// the other instance never rendered it: nothing in its storage, nothing in its log
	for name, c := range map[string]*fluxenv.KCLController{"main": shard, "sharded": kclController()} {
		dir := filepath.Join(c.StorageDir, "kclartifact", ns, name)
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("KCLArtifact %s was stored by the other shard too (%s: %v)", name, dir, err)
		}
		for _, line := range grepLines(c.LogPath, `"name": "`+name+`"`) {
			if strings.Contains(line, ns) {
				t.Errorf("KCLArtifact %s/%s was reconciled by the other shard:\n%s", ns, name, line)
				break
			}
		}
	}
	for _, o := range []client.Object{&kustomizev1.Kustomization{}, &sourcev1.ExternalArtifact{}} {
		if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "sharded"}, o); err != nil {
			t.Fatal(err)
		}
		if got := o.GetLabels()[shardKey]; got != "shard1" {
			t.Errorf("%T sharded: %s=%q, want shard1", o, shardKey, got)
		}
	}
	// Delete it while its shard still runs (cleanups run before the shard is stopped): an
	// artifact server gone for good would leave kustomize-controller retrying downloads from it,
	// and slow to stop at the end of the suite.
	if err := suite.env.Client.Delete(t.Context(), sharded); err != nil {
		t.Fatal(err)
	}
	waitGone(t, &kustomizev1.Kustomization{}, ns, "sharded")
}
