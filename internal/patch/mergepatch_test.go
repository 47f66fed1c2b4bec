package patch

import (
	"encoding/json"
	"reflect"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/fluxcd/pkg/apis/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// TestStatusMergePatchIsClientMergeFrom: for every kind of change a reconcile makes to a status, the
// patch sent is client.MergeFrom's (compared decoded), and turns the old status into the new.
func TestStatusMergePatchIsClientMergeFrom(t *testing.T) {
	base := kclv1.KCLArtifactStatus{
		ObservedGeneration: 2, SourceRevision: "main@sha1:a", InventoryCount: 1,
		Artifact: &meta.Artifact{Revision: "main@sha256:1", Digest: "sha256:1", URL: "http://x/1", Size: ptr.To[int64](3),
			Metadata: map[string]string{"org.opencontainers.image.revision": "main@sha1:a", "stale": "x"}},
		Conditions: []metav1.Condition{{Type: meta.ReadyCondition, Status: metav1.ConditionTrue, Reason: "Succeeded", Message: "a"}},
		Inventory:  []kclv1.ObjectReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "a"}},
	}
	for name, change := range map[string]func(*kclv1.KCLArtifactStatus){
		"nothing":          func(*kclv1.KCLArtifactStatus) {},
		"a scalar":         func(s *kclv1.KCLArtifactStatus) { s.LastHandledReconcileAt = "now" },
		"a nested field":   func(s *kclv1.KCLArtifactStatus) { s.Artifact.URL = "http://x/2" },
		"a nested key out": func(s *kclv1.KCLArtifactStatus) { delete(s.Artifact.Metadata, "stale") },
		"a pointer out":    func(s *kclv1.KCLArtifactStatus) { s.Artifact.Size = nil },
		"an object out":    func(s *kclv1.KCLArtifactStatus) { s.Artifact = nil },
		"a list":           func(s *kclv1.KCLArtifactStatus) { s.Conditions[0].Message = "b" },
		"a list out":       func(s *kclv1.KCLArtifactStatus) { s.Inventory = nil },
		"a zero value":     func(s *kclv1.KCLArtifactStatus) { s.InventoryCount = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			before := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "n", ResourceVersion: "7"}, Status: *base.DeepCopy()}
			after := before.DeepCopy()
			change(&after.Status)
			for _, lock := range []bool{false, true} {
				var want client.Patch = client.MergeFrom(before)
				got := statusMergePatch{from: before.Status}
				if lock {
					want, got.lockedTo = client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}), "7"
				}
				wantData, err := want.Data(after)
				if err != nil {
					t.Fatal(err)
				}
				gotData, err := got.Data(after)
				if err != nil {
					t.Fatal(err)
				}
				if !sameJSON(t, gotData, wantData) {
					t.Fatalf("lock %v: got %s, want %s", lock, gotData, wantData)
				}
				applied, err := jsonpatch.MergePatch(mustJSON(t, before), gotData)
				if err != nil {
					t.Fatal(err)
				}
				var back kclv1.KCLArtifact
				if err := json.Unmarshal(applied, &back); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(back.Status, after.Status) {
					t.Fatalf("the patch gives %+v, want %+v", back.Status, after.Status)
				}
			}
		})
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
