package controller

import (
	"strings"
	"testing"
	"time"

	artcfg "github.com/fluxcd/pkg/artifact/config"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
)

// A storage volume lost with the record (an emptyDir in a restart): status's entries stay
// listed, so that status says what was lost, but a Healthy verdict written there, by the
// controller before the loss or forged by a tenant, proves nothing any more; Failed stays.
// With the record, status is put back as recorded.
func TestLostRecordKeepsEntriesWithoutHealth(t *testing.T) {
	store, err := artifactstore.New(&artcfg.Options{StoragePath: t.TempDir(), StorageAddress: "x:1", StorageAdvAddress: "x:1"})
	if err != nil {
		t.Fatal(err)
	}
	// the recorder of a unit test: the envtest suite reads the real events (kclartifact_stagetrust_test.go)
	events := record.NewFakeRecorder(4)
	r := &KCLArtifactReconciler{Store: store, EventRecorder: events}
	at := metav1.NewTime(time.Now().Add(-2 * time.Hour).Truncate(time.Second))
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns", UID: "u1"}}
	obj.Status.History = []kclv1.ArtifactHistoryEntry{
		{Digest: "sha256:a", Health: kclv1.HealthHealthy, HealthyAt: &at},
		{Digest: "sha256:b", Health: kclv1.HealthFailed},
	}
	h, recorded, err := r.provenHistory(obj)
	if err != nil || recorded {
		t.Fatalf("nothing recorded: %v, %v", recorded, err)
	}
	if len(h) != 2 || h[0].Health != "" || h[0].HealthyAt != nil || h[1].Health != kclv1.HealthFailed {
		t.Fatalf("adopted without a record: %+v; want both entries, the first of unknown health, the second Failed", h)
	}
	if obj.Status.History[0].Health != kclv1.HealthHealthy {
		t.Fatal("provenHistory changed the object's status")
	}

	recordedHistory := []kclv1.ArtifactHistoryEntry{{Digest: "sha256:a", Health: kclv1.HealthProgressing}}
	if err := store.RecordHistory(obj, recordedHistory, nil); err != nil {
		t.Fatal(err)
	}
	if err := r.restoreHistory(obj); err != nil {
		t.Fatal(err)
	}
	if len(obj.Status.History) != 1 || obj.Status.History[0].Health != kclv1.HealthProgressing {
		t.Fatalf("restored %+v, want the recorded history", obj.Status.History)
	}
	if len(events.Events) != 1 || !strings.Contains(<-events.Events, "differed from the controller's record (entries sha256:a, sha256:b)") {
		t.Fatal("the repair was not announced")
	}
}
