package artifactstore

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// The recorded history is the object's own: another object of the same name (a new UID) has
// none, Collect keeps it, an unchanged history is not written again, and nothing recorded is
// not a history.
func TestRecordedHistoryBelongsToItsObject(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "uid-1"}}
	if h, ok, err := s.History(obj); err != nil || ok || h != nil {
		t.Fatalf("before anything: %v %v %v, want nothing recorded", h, ok, err)
	}
	if err := s.RecordHistory(obj, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.LocalPath(meta.Artifact{Path: Dir(obj)})); !os.IsNotExist(err) {
		t.Fatalf("an empty history made a directory: %v", err)
	}

	a, _, err := s.Publish(obj, "main", "all.yaml", contentOf(t, "kind: ConfigMap\n"))
	if err != nil {
		t.Fatal(err)
	}
	at := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	want := []kclv1.ArtifactHistoryEntry{{Digest: a.Digest, URL: a.URL, Health: kclv1.HealthHealthy, HealthyAt: &at,
		Inputs: []kclv1.InputValue{{Name: "web.tag", Value: "1.2.3", From: "ImagePolicy/web"}}}}
	if err := s.RecordHistory(obj, want, nil); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.History(obj)
	if err != nil || !ok || !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("recorded %v %v %v, want %v", got, ok, err, want)
	}
	ledger := filepath.Join(filepath.Dir(s.LocalPath(*a)), ledgerName)
	fi, err := os.Stat(ledger)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("ledger mode %v, want 0600", fi.Mode().Perm())
	}
	// unchanged: not written again
	if err := os.Chtimes(ledger, time.Unix(1, 0), time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordHistory(obj, want, nil); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(ledger); !fi.ModTime().Equal(time.Unix(1, 0)) {
		t.Errorf("an unchanged history was written again")
	}

	// Collect keeps it, whatever the TTL
	s.ArtifactRetentionTTL = 0
	if _, _, err := s.Collect(obj, want); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.History(obj); !ok {
		t.Fatal("Collect removed the recorded history")
	}

	// another object under the same name
	again := obj.DeepCopy()
	again.UID = "uid-2"
	if h, ok, err := s.History(again); err != nil || ok || h != nil {
		t.Fatalf("a new object of the same name reads %v %v %v, want nothing recorded", h, ok, err)
	}
	// a damaged file is no history
	if err := os.WriteFile(ledger, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.History(obj); ok || err != nil {
		t.Fatalf("a damaged record reads as recorded (%v, %v)", ok, err)
	}
}

// The releases an object rejects are recorded beside its history, for that object only, even
// before it published anything (a stage whose waiting artifact was rejected).
func TestRecordedRejectionsBelongToTheirObject(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "ns", UID: "uid-1"}}
	if rs, _, err := s.Rejections(obj); err != nil || rs != nil {
		t.Fatalf("before anything: %v %v, want none", rs, err)
	}
	want := []kclv1.RejectedRelease{{Digest: "sha256:1234", SourceRevision: "main@sha1:v2", RejectedBy: "alice",
		RejectedAt: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}}
	if err := s.RecordHistory(obj, nil, want); err != nil {
		t.Fatal(err)
	}
	if rs, recorded, err := s.Rejections(obj); err != nil || !recorded || !equality.Semantic.DeepEqual(rs, want) {
		t.Fatalf("recorded %v %v, want %v", rs, err, want)
	}
	if h, ok, err := s.History(obj); err != nil || !ok || len(h) != 0 {
		t.Fatalf("history %v %v %v, want an empty one recorded", h, ok, err)
	}
	other := obj.DeepCopy()
	other.UID = "uid-2"
	if rs, _, err := s.Rejections(other); err != nil || rs != nil {
		t.Fatalf("another object of the same name: %v %v, want none", rs, err)
	}
	if err := s.RecordHistory(obj, nil, nil); err != nil {
		t.Fatal(err)
	}
	if rs, _, err := s.Rejections(obj); err != nil || rs != nil {
		t.Fatalf("lifted: %v %v, want none", rs, err)
	}
}
