package ui

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
)

// fakeReader is a fake standing in for the manager's cache (a client.Reader): it holds a few
// KCLArtifacts in memory. The e2e test (test/e2e/ui_test.go) runs the view on the real cache.
type fakeReader struct {
	objs []*kclv1.KCLArtifact
}

func (f *fakeReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	for _, o := range f.objs {
		if o.Namespace == key.Namespace && o.Name == key.Name {
			o.DeepCopyInto(obj.(*kclv1.KCLArtifact))
			return nil
		}
	}
	return apierrors.NewNotFound(schema.GroupResource{Group: kclv1.GroupVersion.Group, Resource: "kclartifacts"}, key.Name)
}

func (f *fakeReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	l := list.(*kclv1.KCLArtifactList)
	for _, o := range f.objs {
		l.Items = append(l.Items, *o.DeepCopy())
	}
	return nil
}

// storeArtifact writes manifests as an artifact of obj laid out as the artifact store does
// (<root>/kclartifact/<ns>/<name>/<sha256 of the content>.tar.gz holding "." and
// manifests.yaml), and returns its history entry.
func storeArtifact(t *testing.T, root string, obj *kclv1.KCLArtifact, sourceRevision, manifests string, objects int, published time.Time) kclv1.ArtifactHistoryEntry {
	t.Helper()
	sum := sha256.Sum256([]byte(manifests))
	file := hex.EncodeToString(sum[:]) + ".tar.gz"
	tgz := tarGz(t, manifests)
	dir := filepath.Join(root, artifactstore.Dir(obj))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), tgz, 0o600); err != nil {
		t.Fatal(err)
	}
	d := sha256.Sum256(tgz)
	digest := "sha256:" + hex.EncodeToString(d[:])
	size := int64(len(tgz))
	return kclv1.ArtifactHistoryEntry{
		Digest: digest, Revision: "main@" + digest, SourceRevision: sourceRevision,
		URL:  fmt.Sprintf("http://artifacts.example/%s/%s", artifactstore.Dir(obj), file),
		Size: &size, Objects: objects, LastPublished: metav1.NewTime(published),
	}
}

func tarGz(t *testing.T, manifests string) []byte {
	t.Helper()
	var b bytes.Buffer
	gw := gzip.NewWriter(&b)
	tw := tar.NewWriter(gw)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: ".", Mode: 0o750},
		{Typeflag: tar.TypeReg, Name: "manifests.yaml", Mode: 0o600, Size: int64(len(manifests))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tw.Write([]byte(manifests)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// publish makes the newest entry of history obj's current artifact, as the controller does.
func publish(obj *kclv1.KCLArtifact, history ...kclv1.ArtifactHistoryEntry) {
	obj.Status.History = history
	cur := history[0]
	obj.Status.Artifact = &meta.Artifact{
		Path: artifactstore.Dir(obj) + "/" + archiveFile(cur), URL: cur.URL, Revision: cur.Revision, Digest: cur.Digest,
		LastUpdateTime: cur.LastPublished, Size: cur.Size,
		Metadata: map[string]string{"org.opencontainers.image.revision": cur.SourceRevision},
	}
	obj.Status.SourceRevision, obj.Status.LastAttemptedRevision = cur.SourceRevision, cur.SourceRevision
	obj.Status.InventoryCount = cur.Objects
}

func newObj(ns, name string) *kclv1.KCLArtifact {
	return &kclv1.KCLArtifact{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kclv1.KCLArtifactSpec{
			SourceRef: kclv1.SourceReference{Kind: "GitRepository", Name: "repo"},
			Interval:  metav1.Duration{Duration: time.Minute},
		},
	}
}

func setReady(obj *kclv1.KCLArtifact, status metav1.ConditionStatus, reason, message string) {
	obj.Status.Conditions = append(obj.Status.Conditions, metav1.Condition{
		Type: meta.ReadyCondition, Status: status, Reason: reason, Message: message,
		LastTransitionTime: metav1.Now(),
	})
}
