package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ocipush"
	"github.com/kcl-flux/kcl-artifact-controller/internal/provenance"
)

// reconcileRestore fetches back, from the OCI repository they were pushed to, the kept
// artifacts the storage lost (a new volume, an emptyDir after a restart): the current artifact
// is served again without a render, and pins and rollbacks to the others work.
//
// Only signed pushes are fetched back. After a lost volume nothing on disk says which history
// entries this controller wrote, and status.history is writable by whoever may write the
// status: an entry naming a tenant's own tarball, with its digest, would pass a digest check.
// A copy is taken only when its signature and provenance verify with the KCLArtifact's own
// signing key, the provenance names this object and this artifact digest (what the controller
// signed when it pushed it), and the layer has that digest. A copy that cannot be had leaves the
// entry missing, as without spec.publish.oci, and says why; it is tried again with backoff.
//
// This step reads spec.publish, for itself and for the push step (p.publish).
func (r *KCLArtifactReconciler) reconcileRestore(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	if pub := obj.Spec.Publish; pub != nil {
		p.publish = pub.OCI
	}
	spec := p.publish
	if spec == nil || spec.Sign == nil || r.Pusher == nil {
		return nil
	}
	lost := r.lostEntries(obj, spec)
	if len(lost) == 0 {
		return nil
	}
	key := "restore/" + string(obj.GetUID())
	if _, wait := r.backoff.waiting(key, obj.Status.History[lost[0]].Digest); wait {
		return nil
	}
	for _, i := range lost {
		e := obj.Status.History[i]
		if err := r.restoreEntry(ctx, obj, spec, e); err != nil {
			r.event(obj, eventWarning, restoreFailedReason, clean(fmt.Sprintf(
				"artifact %s is not in storage and was not fetched back from %s: %v", e.Digest, spec.URL, err)))
			if refusedCopy(err) {
				continue // this entry's copy is not the artifact; the others may be
			}
			// the registry failed: the others wait for the retry
			r.backoff.failed(key, obj.Status.History[lost[0]].Digest, r.Bounds.interval(obj))
			return nil
		}
		obj.Status.History[i].Missing = false
		r.event(obj, eventNormal, restoredReason, fmt.Sprintf("artifact %s was not in storage: fetched back from %s@%s, its signature verified",
			e.Digest, spec.URL, e.OCI.Digest))
	}
	r.backoff.succeeded(key)
	return nil
}

// Reasons of the restore's events.
const (
	restoredReason      = "Restored"
	restoreFailedReason = "RestoreFailed"
)

// lostEntries are the indexes of the entries, within what the history keeps, that were pushed
// signed to spec's repository and are no longer in storage.
func (r *KCLArtifactReconciler) lostEntries(obj *kclv1.KCLArtifact, spec *kclv1.OCIPublish) []int {
	var out []int
	h := obj.Status.History
	// the history step trims what is beyond the limit (a rollback target one more); nothing
	// past it is worth a pull
	for i := 0; i < len(h) && i <= obj.GetHistoryLimit(); i++ {
		e := h[i]
		if e.OCI == nil || !e.OCI.Signed || e.OCI.URL != spec.URL || e.Size == nil || r.Store.Keeps(obj, e) {
			continue
		}
		out = append(out, i)
	}
	return out
}

// restoreEntry pulls the entry's artifact, checks what its verified provenance names, and
// stores it if it has the entry's digest.
func (r *KCLArtifactReconciler) restoreEntry(ctx context.Context, obj *kclv1.KCLArtifact, spec *kclv1.OCIPublish, e kclv1.ArtifactHistoryEntry) error {
	if *e.Size <= 0 || *e.Size > r.maxArtifactBytes() {
		return fmt.Errorf("its recorded size, %d bytes, is not one this controller stores", *e.Size)
	}
	signer, err := r.signer(ctx, obj, spec.Sign)
	if err != nil {
		return err
	}
	pub, err := publicKeyPEM(signer)
	if err != nil {
		return err
	}
	creds, err := r.pushCredentials(ctx, obj, spec)
	if err != nil {
		return err
	}
	pulled, err := r.Pusher.Pull(ctx, ocipush.PullRequest{Domain: obj.GetNamespace(),
		Repository: strings.TrimPrefix(spec.URL, "oci://"), Insecure: spec.Insecure, DockerConfig: creds,
		Manifest: e.OCI.Digest, MaxBytes: *e.Size, PublicKey: pub})
	if err != nil {
		return err
	}
	defer pulled.Remove()
	if err := provenanceNames(pulled.Statement, obj, e); err != nil {
		return err
	}
	if err := r.Store.Restore(obj, e, pulled.File); err != nil {
		return fmt.Errorf("%w: %w", errOtherArtifact, err)
	}
	return nil
}

// provenanceNames checks the verified provenance is this controller's, of this object's
// artifact of this digest, pushed as that manifest: a signature of another object's (or
// another artifact's) push is no proof for this entry.
func provenanceNames(statement []byte, obj *kclv1.KCLArtifact, e kclv1.ArtifactHistoryEntry) error {
	b, err := provenance.Read(statement)
	if err != nil {
		return err
	}
	if b.InvocationID != invocationID(obj, e.Digest) || b.Manifest != e.OCI.Digest {
		return fmt.Errorf("%w: its signed provenance names another push", errOtherArtifact)
	}
	return nil
}

// refusedCopy: the registry answered, and what it holds is not the entry's artifact.
func refusedCopy(err error) bool {
	var pe *ocipush.Error
	return errors.Is(err, errOtherArtifact) || errors.As(err, &pe) && pe.Reason == ocipush.ReasonRefused
}

// errOtherArtifact: a copy whose signed provenance or digest names another artifact.
var errOtherArtifact = errors.New("the copy is of another artifact")

// invocationID names, in the provenance, the push of obj's artifact of digest.
func invocationID(obj *kclv1.KCLArtifact, digest string) string {
	return string(obj.GetUID()) + "/" + digest
}

func publicKeyPEM(v signature.Verifier) ([]byte, error) {
	pk, err := v.PublicKey()
	if err != nil {
		return nil, err
	}
	return cryptoutils.MarshalPublicKeyToPEM(pk)
}

// maxArtifactBytes bounds an artifact fetched back: a tarball of at most the largest output
// a render may have, with room for the archive's headers.
func (r *KCLArtifactReconciler) maxArtifactBytes() int64 {
	if r.MaxOutput > 0 {
		return 2*int64(r.MaxOutput) + 1<<20
	}
	return 256 << 20
}
