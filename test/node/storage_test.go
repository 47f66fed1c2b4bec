package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// storageClaim is the PersistentVolumeClaim of config/persistent-storage.
const storageClaim = "kcl-artifact-controller-storage"

// usePersistentStorage installs the controller from config/persistent-storage over the current
// install (the Deployment replaces its Pod). The node has no dynamic provisioner, so a hostPath
// PersistentVolume owned by the controller's user is made for the overlay's claim beforehand, as
// an administrator pre-binds one (claimRef). At the end of the test the controller goes back to
// config/default, and the claim and the volume are deleted.
func usePersistentStorage(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	dir := filepath.Join(suite.node.DataDir, "pv", strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// hostPath volumes are not changed to the Pod's fsGroup: the directory is the user's
	if err := os.Chown(dir, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	hostPathDir := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "kcl-storage-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: controllerNS, Name: storageClaim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostPathDir}},
		}}
	if len(pv.Name) > 63 {
		pv.Name = pv.Name[:63]
	}
	create(t, pv)
	t.Cleanup(func() { defaultStorage(t, pv) })

	began := time.Now()
	if err := suite.install.ControllerFrom(ctx, "config/persistent-storage", controllerImage); err != nil {
		t.Fatal(err)
	}
	figure("persistent-storage install to rolled out", time.Since(began))
	pod, err := controllerPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if claim := dataClaim(pod); claim != storageClaim {
		t.Fatalf("the controller Pod's volume data is not the claim %s: %q", storageClaim, claim)
	}
	var pvc corev1.PersistentVolumeClaim
	if err := suite.client.Get(ctx, client.ObjectKey{Namespace: controllerNS, Name: storageClaim}, &pvc); err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName != pv.Name {
		t.Fatalf("the claim is %s to %q, want Bound to %s", pvc.Status.Phase, pvc.Spec.VolumeName, pv.Name)
	}
	if pvc.Spec.StorageClassName != nil && *pvc.Spec.StorageClassName != "" {
		t.Fatalf("the overlay's claim has a storage class: %q", *pvc.Spec.StorageClassName)
	}
}

// defaultStorage puts the controller back on config/default (emptyDir) and removes the claim and
// the volume.
func defaultStorage(t *testing.T, pv *corev1.PersistentVolume) {
	ctx := context.Background()
	if err := suite.install.ControllerFrom(ctx, "config/default", controllerImage); err != nil {
		t.Errorf("going back to config/default: %v", err)
		return
	}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: controllerNS, Name: storageClaim}}
	for _, obj := range []client.Object{pvc, pv} {
		if err := suite.client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			t.Errorf("deleting %s: %v", obj.GetName(), err)
			continue
		}
		waitFor(t, obj.GetName()+" deleted", func(ctx context.Context) (bool, string, error) {
			err := suite.client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			if apierrors.IsNotFound(err) {
				return true, "", nil
			}
			return false, fmt.Sprintf("finalizers %v", obj.GetFinalizers()), client.IgnoreNotFound(err)
		})
	}
}

// dataClaim is the claim of the controller Pod's storage volume ("" for an emptyDir).
func dataClaim(pod *corev1.Pod) string {
	for _, v := range pod.Spec.Volumes {
		if v.Name == "data" && v.PersistentVolumeClaim != nil {
			return v.PersistentVolumeClaim.ClaimName
		}
	}
	return ""
}

// TestStorageAcrossRestarts: with config/persistent-storage, a restarted controller serves the
// history, the pin and the artifacts it had without rendering anything, and the workload is left
// alone; with config/default's emptyDir, the entries whose files went with the Pod are marked
// missing and cannot be pinned.
func TestStorageAcrossRestarts(t *testing.T) {
	usePersistentStorage(t)
	ctx := context.Background()
	ns := newNamespace(t, "storage")
	settings := func(message string) map[string]string {
		return map[string]string{"kcl.yaml": settingsFile(map[string]any{"message": message})}
	}
	sha1 := createRepo(t, ns, "storage", "node-app", settings("s1"))
	create(t, appArtifact(ns, "storage"))
	// a second KCLArtifact, not pinned, whose inputs do not change: rendered again after a
	// restart only if its artifact is gone
	create(t, kclArtifact(ns, "plain", "storage", func(o *kclv1.KCLArtifact) {
		o.Spec.Settings = []string{"kcl.yaml"}
		o.Spec.Kustomization = &kclv1.KustomizationTemplate{Disabled: true}
	}))
	waitApplied(t, ns, "app", gitRevision(sha1))
	waitAnswers(t, ns, "s1", "")
	sha2 := commit(t, "storage", "message s2", settings("s2"))
	obj, _ := waitApplied(t, ns, "app", gitRevision(sha2))
	waitAnswers(t, ns, "s2", "")
	if len(obj.Status.History) != 2 {
		t.Fatalf("want 2 history entries after two commits, got %s", historyOf(obj))
	}
	var older kclv1.ArtifactHistoryEntry
	for _, e := range obj.Status.History {
		if e.SourceRevision == gitRevision(sha1) {
			older = e
		}
	}
	if older.Digest == "" || older.Digest == obj.Status.Artifact.Digest {
		t.Fatalf("no history entry of the first commit besides the current one: %s", historyOf(obj))
	}

	patchSpec(t, ns, "app", fmt.Sprintf(`{"pinnedDigest":%q}`, older.Digest))
	waitFor(t, "app pinned to "+older.Digest, func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, "app")
		if err != nil {
			return false, "", err
		}
		return obj.Status.Artifact != nil && obj.Status.Artifact.Digest == older.Digest &&
			conditions.GetReason(obj, meta.ReadyCondition) == kclv1.PinnedReason &&
			conditions.IsTrue(obj, meta.ReadyCondition), kclState(obj), nil
	})
	waitAnswers(t, ns, "s1", "")

	t.Run("persistent storage: a restart renders nothing and serves what was kept", func(t *testing.T) {
		before, err := getKCLArtifact(ctx, ns, "app")
		if err != nil {
			t.Fatal(err)
		}
		plainBefore, err := getKCLArtifact(ctx, ns, "plain")
		if err != nil {
			t.Fatal(err)
		}
		uids := podUIDs(t, ns)
		pod, began := replaceControllerPod(t)
		if claim := dataClaim(pod); claim != storageClaim {
			t.Fatalf("the new controller Pod's storage is not the claim: %q", claim)
		}
		figure("storage: Pod deleted to new Pod Ready", time.Since(began))
		waitFor(t, "the pinned artifact served again", func(ctx context.Context) (bool, string, error) {
			for _, url := range []string{older.URL, before.Status.Artifact.URL} {
				if err := fetchDigest(ctx, url, older.Digest); err != nil {
					return false, err.Error(), nil
				}
			}
			return allArtifactsServed(ctx)
		})
		figure("storage: Pod deleted to artifacts answering", time.Since(began))

		// the new Pod has reconciled both: each handled a request made after it started
		requestReconcile(t, &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}})
		requestReconcile(t, &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"}})
		renders := rendersIn(t, pod, ns)
		figureCount("storage: renders after the restart (persistent)", renders)
		if renders != 0 {
			t.Errorf("the restarted controller rendered %d times in %s; its storage was kept", renders, ns)
		}
		after, err := getKCLArtifact(ctx, ns, "app")
		if err != nil {
			t.Fatal(err)
		}
		if r := conditions.GetReason(after, meta.ReadyCondition); r != kclv1.PinnedReason || !conditions.IsReady(after) {
			t.Errorf("after the restart the pin is not served: %s", kclState(after))
		}
		if after.Status.Artifact == nil || after.Status.Artifact.Digest != older.Digest {
			t.Errorf("after the restart the artifact is %+v, want the pinned %s", after.Status.Artifact, older.Digest)
		}
		if len(after.Status.History) != 2 {
			t.Errorf("after the restart the history is %s, want both entries", historyOf(after))
		}
		for _, e := range before.Status.History {
			got, ok := historyEntry(after, e.Digest)
			if !ok || got.Missing {
				t.Errorf("after the restart the entry %s is gone or missing: %s", e.Digest, historyOf(after))
				continue
			}
			if err := fetchDigest(ctx, got.URL, got.Digest); err != nil {
				t.Errorf("after the restart the entry %s is not served: %v", e.Digest, err)
			}
		}
		plainAfter, err := getKCLArtifact(ctx, ns, "plain")
		if err != nil {
			t.Fatal(err)
		}
		if plainAfter.Status.Artifact == nil || plainAfter.Status.Artifact.Digest != plainBefore.Status.Artifact.Digest ||
			!conditions.IsReady(plainAfter) {
			t.Errorf("the unpinned KCLArtifact changed across the restart: %s", kclState(plainAfter))
		}
		if now := podUIDs(t, ns); now != uids {
			t.Errorf("the application's Pods changed across the restart: %s -> %s", uids, now)
		}
		waitAnswers(t, ns, "s1", "")
	})
	if t.Failed() {
		return
	}

	t.Run("emptyDir: entries whose files are gone are marked missing", func(t *testing.T) {
		// back to config/default: the Deployment replaces the Pod, whose emptyDir is empty
		began := time.Now()
		if err := suite.install.ControllerFrom(ctx, "config/default", controllerImage); err != nil {
			t.Fatal(err)
		}
		pod, err := controllerPod(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if claim := dataClaim(pod); claim != "" {
			t.Fatalf("config/default's controller Pod still uses the claim %q", claim)
		}
		figure("storage: back to emptyDir to rolled out", time.Since(began))
		var obj *kclv1.KCLArtifact
		waitFor(t, "the pin to a file gone refused", func(ctx context.Context) (bool, string, error) {
			var err error
			if obj, err = getKCLArtifact(ctx, ns, "app"); err != nil {
				return false, "", err
			}
			return conditions.GetReason(obj, meta.ReadyCondition) == kclv1.PinnedArtifactNotFoundReason, kclState(obj), nil
		})
		t.Logf("pinned to a missing artifact: %s", readyMessage(obj))
		if msg := conditions.GetMessage(obj, meta.ReadyCondition); !strings.Contains(msg, "no longer in storage") {
			t.Errorf("the refused pin does not say that the file is gone: %q", msg)
		}
		// the reconcile that found the pinned file gone has written the history: both files went
		// with the emptyDir
		if len(obj.Status.History) != 2 {
			t.Errorf("the history is %s, want both entries still listed", historyOf(obj))
		}
		for _, e := range obj.Status.History {
			if err := fetchDigest(ctx, e.URL, e.Digest); err == nil {
				t.Errorf("the entry %s is served, though the emptyDir was emptied", e.Digest)
			}
			if !e.Missing {
				t.Errorf("the entry %s is not marked missing while the pin to %s fails: %s", e.Digest, older.Digest, historyOf(obj))
			}
		}

		// unpinned, the inputs are rendered again: that entry is back, the other stays missing
		patchSpec(t, ns, "app", `{"pinnedDigest":null}`)
		current, _ := waitApplied(t, ns, "app", gitRevision(sha2))
		waitAnswers(t, ns, "s2", "")
		expectMissing(t, ns, "app", older.Digest)

		// a plain Pod deletion: the current artifact is rendered again, the old one stays missing
		uids := podUIDs(t, ns)
		pod, began = replaceControllerPod(t)
		waitFor(t, "every artifact served again", func(ctx context.Context) (bool, string, error) {
			return allArtifactsServed(ctx)
		})
		figure("storage: emptyDir Pod deleted to artifacts answering", time.Since(began))
		obj = expectMissing(t, ns, "app", older.Digest)
		if obj.Status.Artifact == nil || obj.Status.Artifact.Digest != current.Status.Artifact.Digest {
			t.Errorf("the same inputs rendered another artifact after the restart: %+v, was %s",
				obj.Status.Artifact, current.Status.Artifact.Digest)
		}
		renders := rendersIn(t, pod, ns)
		figureCount("storage: renders after the restart (emptyDir)", renders)
		if renders == 0 {
			t.Errorf("the controller serves %s again without rendering it, though its emptyDir was emptied", obj.Status.Artifact.Digest)
		}
		if now := podUIDs(t, ns); now != uids {
			t.Errorf("the application's Pods changed across the restart: %s -> %s", uids, now)
		}

		patchSpec(t, ns, "app", fmt.Sprintf(`{"pinnedDigest":%q}`, older.Digest))
		waitFor(t, "a pin to the missing entry refused", func(ctx context.Context) (bool, string, error) {
			obj, err := getKCLArtifact(ctx, ns, "app")
			if err != nil {
				return false, "", err
			}
			return conditions.GetReason(obj, meta.ReadyCondition) == kclv1.PinnedArtifactNotFoundReason, kclState(obj), nil
		})
		waitAnswers(t, ns, "s2", "")
		patchSpec(t, ns, "app", `{"pinnedDigest":null}`)
	})
}

// expectMissing waits until the entry of digest is listed with missing: true while the current
// artifact's entry is present and served, and returns the KCLArtifact.
func expectMissing(t *testing.T, ns, name, digest string) *kclv1.KCLArtifact {
	t.Helper()
	var obj *kclv1.KCLArtifact
	waitFor(t, "the entry "+digest+" marked missing, the current one present", func(ctx context.Context) (bool, string, error) {
		var err error
		if obj, err = getKCLArtifact(ctx, ns, name); err != nil {
			return false, "", err
		}
		if obj.Status.Artifact == nil || !conditions.IsReady(obj) {
			return false, kclState(obj), nil
		}
		old, ok := historyEntry(obj, digest)
		cur, curOK := historyEntry(obj, obj.Status.Artifact.Digest)
		if !ok || !old.Missing || !curOK || cur.Missing {
			return false, "history " + historyOf(obj), nil
		}
		if err := fetchDigest(ctx, cur.URL, cur.Digest); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	return obj
}
