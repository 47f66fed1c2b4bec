package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/sigstore/pkg/signature"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ocipush"
	"github.com/kcl-flux/kcl-artifact-controller/internal/provenance"
	"github.com/kcl-flux/kcl-artifact-controller/internal/version"
)

// reconcilePush copies the artifact served (the one just published, a rollback's, a pin's) to
// spec.publish.oci, signed when asked, and records where in its history entry; the moving tag
// then names it. A registry that refuses it does not fail the reconcile: the artifact is
// published in the cluster, PushFailed says why, and the push is tried again with backoff
// (registryBackoff), whatever wakes the reconciles in between. The restore step read
// spec.publish.oci into p.publish.
func (r *KCLArtifactReconciler) reconcilePush(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	spec := p.publish
	if spec == nil {
		conditions.Delete(obj, kclv1.PushFailedCondition)
		return nil
	}
	entry := servedEntry(obj)
	if entry == nil {
		return nil
	}
	if pushed(entry.OCI, spec) {
		conditions.Delete(obj, kclv1.PushFailedCondition)
		return nil
	}
	key := "push/" + string(obj.GetUID())
	if next, wait := r.backoff.waiting(key, entry.Digest); wait {
		p.retryAt = next
		return nil
	}
	rec, err := r.pushOrTag(ctx, obj, p, spec, entry)
	if err != nil {
		r.pushFailed(obj, err)
		p.retryAt = r.backoff.failed(key, entry.Digest, r.Bounds.interval(obj))
		return nil
	}
	r.backoff.succeeded(key)
	tagged(obj, entry, rec)
	if conditions.Has(obj, kclv1.PushFailedCondition) {
		r.event(obj, eventNormal, "Pushed", fmt.Sprintf("pushed to %s@%s after a failure", rec.URL, rec.Digest))
	}
	conditions.Delete(obj, kclv1.PushFailedCondition)
	return nil
}

// servedEntry is the history entry of the artifact served, nil when there is none.
func servedEntry(obj *kclv1.KCLArtifact) *kclv1.ArtifactHistoryEntry {
	if obj.Status.Artifact == nil {
		return nil
	}
	for i := range obj.Status.History {
		if obj.Status.History[i].Digest == obj.Status.Artifact.Digest {
			return &obj.Status.History[i]
		}
	}
	return nil
}

// tagged records entry's push; the moving tag names it now, no longer any other entry.
func tagged(obj *kclv1.KCLArtifact, entry *kclv1.ArtifactHistoryEntry, rec *kclv1.OCIRecord) {
	for i := range obj.Status.History {
		if o := obj.Status.History[i].OCI; o != nil && o.URL == rec.URL && o.Tag == rec.Tag {
			o.Tag = ""
		}
	}
	entry.OCI = rec
}

// pushed: the entry was pushed where spec says, under its tag, signed when spec signs.
func pushed(rec *kclv1.OCIRecord, spec *kclv1.OCIPublish) bool {
	return rec != nil && rec.URL == spec.URL && rec.Tag == spec.OCITag() && rec.Signed == (spec.Sign != nil)
}

// pushOrTag moves the tag to the entry's artifact when it was pushed there already (a rollback,
// a pin: built again, its manifest could differ, and its signature would), else pushes it.
func (r *KCLArtifactReconciler) pushOrTag(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline, spec *kclv1.OCIPublish, entry *kclv1.ArtifactHistoryEntry) (*kclv1.OCIRecord, error) {
	rec := entry.OCI
	if rec == nil || rec.URL != spec.URL || rec.Signed != (spec.Sign != nil) || r.Pusher == nil {
		return r.push(ctx, obj, p, spec, entry)
	}
	creds, err := r.pushCredentials(ctx, obj, spec)
	if err != nil {
		return nil, err
	}
	err = r.Pusher.Tag(ctx, ocipush.TagRequest{Domain: obj.GetNamespace(), Repository: strings.TrimPrefix(spec.URL, "oci://"),
		Insecure: spec.Insecure, DockerConfig: creds, Manifest: rec.Digest, Tag: spec.OCITag()})
	if err != nil && strings.Contains(err.Error(), "(HTTP 404)") {
		// the registry no longer has it: pushed again, from storage
		return r.push(ctx, obj, p, spec, entry)
	}
	if err != nil {
		return nil, err
	}
	moved := *rec
	moved.Tag = spec.OCITag()
	return &moved, nil
}

// push pushes the entry's artifact and returns its record.
func (r *KCLArtifactReconciler) push(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline, spec *kclv1.OCIPublish, entry *kclv1.ArtifactHistoryEntry) (*kclv1.OCIRecord, error) {
	if r.Pusher == nil {
		return nil, &ocipush.Error{Reason: kclv1.PushFailedReason, Detail: "this controller pushes no artifacts (started without OCI pushes)"}
	}
	if secrets := secretSources(obj, entry); len(secrets) > 0 {
		// as exports: what is rendered from a Secret does not leave the cluster's access control
		return nil, &ocipush.Error{Reason: kclv1.PushFailedReason, Detail: fmt.Sprintf("the artifact is not pushed: this KCLArtifact "+
			"reads Secret inputs (argumentsFrom %s), and what is rendered from them would be readable by whoever can pull "+
			"the repository", strings.Join(secrets, ", "))}
	}
	req, err := r.pushRequest(ctx, obj, p, spec, entry)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	res, err := r.Pusher.Push(ctx, *req)
	if err != nil {
		return nil, err
	}
	ctrl.LoggerFrom(ctx).Info("artifact pushed", "repository", res.Repository, "digest", res.Digest,
		"signed", res.Signed, "bytes", res.Bytes, "duration", time.Since(start).String())
	return &kclv1.OCIRecord{URL: spec.URL, Digest: res.Digest, Tag: spec.OCITag(), Signed: res.Signed, PushedAt: metav1.Now()}, nil
}

// secretSources are the Secrets the KCLArtifact reads now, or the entry was rendered from (an
// older artifact published again by a rollback or a pin, when the spec read a Secret then).
func secretSources(obj *kclv1.KCLArtifact, entry *kclv1.ArtifactHistoryEntry) []string {
	secrets := arguments.SecretInputs(obj)
	for _, in := range entry.Inputs {
		if strings.HasPrefix(in.From, "Secret/") && !slices.Contains(secrets, in.From) {
			secrets = append(secrets, in.From)
		}
	}
	return secrets
}

// pushRequest reads what spec names (the tarball, the Secrets) into a push of the entry.
func (r *KCLArtifactReconciler) pushRequest(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline, spec *kclv1.OCIPublish, entry *kclv1.ArtifactHistoryEntry) (*ocipush.Request, error) {
	req := &ocipush.Request{Domain: obj.GetNamespace(), Repository: strings.TrimPrefix(spec.URL, "oci://"),
		Insecure: spec.Insecure, Artifact: r.Store.LocalPath(*obj.Status.Artifact), ArtifactDigest: entry.Digest,
		Tag: spec.OCITag(), Meta: ociartifact.Meta{Source: sourceOf(obj, p), Revision: entry.Revision}}
	creds, err := r.pushCredentials(ctx, obj, spec)
	if err != nil {
		return nil, err
	}
	req.DockerConfig = creds
	if spec.Sign != nil {
		s, err := r.signer(ctx, obj, spec.Sign)
		if err != nil {
			return nil, err
		}
		req.Signer = s
		req.Provenance = func(m v1.Hash) ([]byte, error) {
			return provenance.Statement(r.provenanceOf(obj, req.Repository, m, entry))
		}
	}
	return req, nil
}

// pushCredentials is the docker config of spec.secretRef, read from the KCLArtifact's own
// namespace only; empty without one.
func (r *KCLArtifactReconciler) pushCredentials(ctx context.Context, obj *kclv1.KCLArtifact, spec *kclv1.OCIPublish) ([]byte, error) {
	ref := spec.SecretRef
	if ref == nil {
		return []byte{}, nil
	}
	data, err := r.secretData(ctx, obj.GetNamespace(), ref.Name)
	if err != nil {
		return nil, &ocipush.Error{Reason: kclv1.PushFailedReason, Detail: "publish.oci.secretRef: " + err.Error()}
	}
	cfg, ok := kclmod.DockerConfigFromSecretData(data)
	if !ok {
		return nil, &ocipush.Error{Reason: kclv1.PushFailedReason, Detail: fmt.Sprintf(
			"publish.oci.secretRef: Secret %s/%s has no .dockerconfigjson", obj.GetNamespace(), ref.Name)}
	}
	return cfg, nil
}

// signer reads the cosign key of spec; the key never leaves this process.
func (r *KCLArtifactReconciler) signer(ctx context.Context, obj *kclv1.KCLArtifact, sign *kclv1.OCISign) (signature.SignerVerifier, error) {
	fail := func(format string, a ...any) error {
		return &ocipush.Error{Reason: kclv1.SignFailedReason, Detail: "publish.oci.sign.secretRef: " + fmt.Sprintf(format, a...)}
	}
	var secret corev1.Secret
	key := client.ObjectKey{Namespace: obj.GetNamespace(), Name: sign.SecretRef.Name}
	if err := r.Get(ctx, key, &secret); err != nil {
		return nil, fail("reading Secret %s: %v", key, err)
	}
	if _, ok := secret.Data["cosign.key"]; !ok {
		return nil, fail("Secret %s has no cosign.key", key)
	}
	s, err := r.signers.load(&secret)
	if err != nil {
		return nil, fail("Secret %s: %v", key, err)
	}
	return s, nil
}

// signerCache keeps the keys loaded, by Secret and its version: decrypting a cosign key costs a
// scrypt derivation of 64 to 128 MiB, done once per key version (a wrong password too) and one at
// a time, so that no number of pushes (or of a tenant's key Secrets) holds more than one
// derivation's memory.
type signerCache struct {
	mu sync.Mutex
	m  map[string]loadedKey
}

type loadedKey struct {
	signer signature.SignerVerifier
	err    error
}

// signerCacheSize bounds the keys kept; past it the cache starts again.
const signerCacheSize = 256

func (c *signerCache) load(s *corev1.Secret) (signature.SignerVerifier, error) {
	id := string(s.UID) + "/" + s.ResourceVersion
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.m[id]; ok {
		return k.signer, k.err
	}
	signer, err := ociartifact.LoadSigner(s.Data["cosign.key"], s.Data["cosign.password"])
	if c.m == nil || len(c.m) >= signerCacheSize {
		c.m = map[string]loadedKey{}
	}
	c.m[id] = loadedKey{signer, err}
	return signer, err
}

// sourceOf is the artifact's org.opencontainers.image.source: the address of the source it was
// rendered from, else the source object.
func sourceOf(obj *kclv1.KCLArtifact, p *pipeline) string {
	if p.in != nil && p.in.origin != "" {
		return p.in.origin
	}
	return obj.Spec.SourceRef.Kind + "/" + obj.Spec.SourceRef.Name
}

// provenanceOf is what made the entry: what its render recorded (the source as it was read, the
// path, the dependencies resolved; nothing after a restart, which the statement says), the
// arguments history recorded (Secret values already `***`), the engine and this controller. The
// spec is not read again: a pin or a retry publishes an artifact the spec may no longer render.
func (r *KCLArtifactReconciler) provenanceOf(obj *kclv1.KCLArtifact, repo string, m v1.Hash, entry *kclv1.ArtifactHistoryEntry) provenance.Build {
	b := provenance.Build{Repository: repo, Manifest: m.String(), SourceRevision: entry.SourceRevision,
		Engine: r.EngineVersion, Controller: provenanceBuilder, ControllerVersion: version.Version,
		InvocationID: invocationID(obj, entry.Digest), FinishedOn: entry.LastPublished.Time}
	if rec, ok := r.renders.of(obj, entry.Digest); ok {
		b.SourceKind, b.SourceURL, b.SourceDigest, b.Path = rec.sourceKind, rec.sourceURL, rec.sourceDigest, rec.path
		b.Dependencies, b.DependenciesRecorded = rec.deps, true
	}
	if len(entry.Inputs) > 0 {
		b.Arguments = map[string]string{}
	}
	for _, in := range entry.Inputs {
		b.Arguments[in.Name] = in.Value
		if in.From != "" {
			b.Inputs = append(b.Inputs, provenance.Input{Name: in.Name, From: in.From})
		}
	}
	return b
}

// provenanceBuilder is the builder id of the provenance this controller signs.
const provenanceBuilder = "https://github.com/kcl-flux/kcl-artifact-controller"

// pushFailed records a failed push: PushFailed with the reason, and an event when it starts
// failing or its reason changes.
func (r *KCLArtifactReconciler) pushFailed(obj *kclv1.KCLArtifact, err error) {
	reason := kclv1.PushFailedReason
	var pe *ocipush.Error
	if errors.As(err, &pe) && pe.Reason == kclv1.SignFailedReason {
		reason = kclv1.SignFailedReason
	}
	// a registry's words never reach status whole (the errors quote statuses, not bodies)
	msg := clean(err.Error())
	before := conditions.Get(obj, kclv1.PushFailedCondition)
	conditions.MarkTrue(obj, kclv1.PushFailedCondition, reason, "%s", msg)
	if before == nil || before.Reason != reason || before.Message != msg {
		r.event(obj, eventWarning, reason, msg)
	}
}

// renderRecords keep, per artifact rendered by this process, what its render read and resolved,
// for the provenance of its push (in the same reconcile, or a retry). A push after a restart of
// an artifact rendered before it finds none: its provenance says the dependencies are not
// recorded, rather than claiming there were none.
type renderRecords struct {
	mu sync.Mutex
	m  map[string]renderRecord
}

// renderRecord is what one render read: the source (its kind, address and artifact digest), the
// package's path, and the kcl.mod dependencies resolved.
type renderRecord struct {
	sourceKind, sourceURL, sourceDigest, path string
	deps                                      []provenance.Dependency
}

// renderRecordsSize bounds the artifacts remembered; past it the record starts again.
const renderRecordsSize = 4096

func renderKey(obj *kclv1.KCLArtifact, digest string) string {
	return string(obj.GetUID()) + "/" + digest
}

func (d *renderRecords) remember(obj *kclv1.KCLArtifact, digest string, rec renderRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil || len(d.m) >= renderRecordsSize {
		d.m = map[string]renderRecord{}
	}
	d.m[renderKey(obj, digest)] = rec
}

func (d *renderRecords) of(obj *kclv1.KCLArtifact, digest string) (renderRecord, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, ok := d.m[renderKey(obj, digest)]
	return rec, ok
}
