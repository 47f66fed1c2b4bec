package controller

import (
	"context"
	"fmt"
	"strings"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ocipush"
)

// reconcileRestore fetches back, from the OCI repository they were pushed to, the kept
// artifacts the storage lost (a new volume, an emptyDir after a restart): the current artifact is
// served again without a render, and pins and rollbacks to the others work. A copy is stored
// only with the digest the history recorded when this controller wrote the artifact. A copy
// that cannot be had leaves the entry missing, as without spec.publish.oci, and says why.
func (r *KCLArtifactReconciler) reconcileRestore(ctx context.Context, obj *kclv1.KCLArtifact, _ *pipeline) error {
	pub := obj.Spec.Publish
	if pub == nil || pub.OCI == nil || r.Pusher == nil {
		return nil
	}
	var creds []byte
	for i, e := range obj.Status.History {
		if e.OCI == nil || e.Size == nil || r.Store.Keeps(obj, e) {
			continue
		}
		if creds == nil {
			var err error
			if creds, err = r.pushCredentials(ctx, obj, pub.OCI); err != nil {
				r.event(obj, eventWarning, restoreFailedReason, fmt.Sprintf("artifact %s is not in storage and cannot be fetched back: %v", e.Digest, err))
				return nil
			}
		}
		if err := r.restore(ctx, obj, pub.OCI, e, creds); err != nil {
			r.event(obj, eventWarning, restoreFailedReason, fmt.Sprintf("artifact %s is not in storage and could not be fetched back from %s@%s: %v",
				e.Digest, e.OCI.URL, e.OCI.Digest, err))
			continue
		}
		obj.Status.History[i].Missing = false
		r.event(obj, eventNormal, restoredReason, fmt.Sprintf("artifact %s was not in storage: fetched back from %s@%s", e.Digest, e.OCI.URL, e.OCI.Digest))
	}
	return nil
}

// Reasons of the restore's events.
const (
	restoredReason      = "Restored"
	restoreFailedReason = "RestoreFailed"
)

// restore pulls the entry's artifact and stores it, if it has the entry's digest.
func (r *KCLArtifactReconciler) restore(ctx context.Context, obj *kclv1.KCLArtifact, spec *kclv1.OCIPublish, e kclv1.ArtifactHistoryEntry, creds []byte) error {
	file, cleanup, err := r.Pusher.Pull(ctx, ocipush.PullRequest{Domain: obj.GetNamespace(),
		Repository: strings.TrimPrefix(e.OCI.URL, "oci://"), Insecure: spec.Insecure, DockerConfig: creds,
		Manifest: e.OCI.Digest, MaxBytes: *e.Size})
	if err != nil {
		return err
	}
	defer cleanup()
	return r.Store.Restore(obj, e, file)
}
