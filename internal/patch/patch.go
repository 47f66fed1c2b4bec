// Package patch writes what a reconciliation changed on a KCLArtifact back to the API server,
// and remembers the resourceVersion of this controller's last write of each, as fluxcd/pkg's
// runtime/patch does for Flux's controllers, with fewer requests: at most one status patch and
// one metadata patch a reconciliation, status patches computed without decoding the statuses
// into maps, and only the metadata read back.
package patch

import (
	"context"
	"fmt"
	"time"

	"github.com/fluxcd/pkg/runtime/conditions"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// StatusPatcher writes what a reconciliation changed on a KCLArtifact with at most one status
// patch and one metadata patch. Flux's patch helper sends conditions and the rest of the status as
// two patches; re-publishing a thousand KCLArtifacts after a commit, that second request (and the
// watch event it sends every client) was a quarter of the API server's CPU (docs/benchmarks.md#scale).
// Conditions keep the helper's guarantees: when they changed, the status patch carries the
// resourceVersion it was computed from, and on a conflict only our condition changes are applied
// to the latest object (owned conditions win), as the helper does.
type StatusPatcher struct {
	client     client.Client
	fieldOwner string
	owned      []string
	messages   func(string) string
	before     *kclv1.KCLArtifact
}

// Option configures a StatusPatcher.
type Option func(*StatusPatcher)

// WithConditionMessages has every condition message rewritten by f before the status is
// compared and sent (the controller makes them safe to show and bounds their length).
func WithConditionMessages(f func(string) string) Option {
	return func(p *StatusPatcher) { p.messages = f }
}

// NewStatusPatcher returns a patcher of obj as it is now, whose changes it will send as
// fieldOwner; owned are the condition types this controller writes, which win on a conflict.
func NewStatusPatcher(obj *kclv1.KCLArtifact, c client.Client, fieldOwner string, owned []string, opts ...Option) *StatusPatcher {
	p := &StatusPatcher{client: c, fieldOwner: fieldOwner, owned: owned, before: obj.DeepCopy()}
	for _, o := range opts {
		o(p)
	}
	return p
}

// conflictBackoff is the patch helper's: the cache needs a moment to catch up with the writer.
var conflictBackoff = wait.Backoff{Steps: 5, Duration: 100 * time.Millisecond, Jitter: 1.0}

// Patch sends the status first: once a deleted object's finalizer is gone, so may be the object.
func (p *StatusPatcher) Patch(ctx context.Context, obj *kclv1.KCLArtifact) error {
	if err := p.patchStatus(ctx, obj); err != nil {
		return err
	}
	if err := p.patchMetadata(ctx, obj); err != nil {
		return err
	}
	p.before = obj.DeepCopy()
	return nil
}

func (p *StatusPatcher) patchMetadata(ctx context.Context, obj *kclv1.KCLArtifact) error {
	// The server's bookkeeping moves with every write; it is not a change of ours. Shallow copies
	// compare: nothing is copied deeply unless there is a patch to send.
	beforeMeta := p.before.ObjectMeta
	beforeMeta.ResourceVersion, beforeMeta.ManagedFields = obj.ResourceVersion, obj.ManagedFields
	if equality.Semantic.DeepEqual(beforeMeta, obj.ObjectMeta) && equality.Semantic.DeepEqual(p.before.Spec, obj.Spec) {
		return nil
	}
	before, after := p.before.DeepCopy(), obj.DeepCopy()
	before.Status, after.Status = kclv1.KCLArtifactStatus{}, kclv1.KCLArtifactStatus{}
	before.ResourceVersion, before.ManagedFields = after.ResourceVersion, after.ManagedFields
	if err := p.client.Patch(ctx, after, client.MergeFrom(before), client.FieldOwner(p.fieldOwner)); err != nil {
		return err
	}
	obj.SetResourceVersion(after.GetResourceVersion())
	return nil
}

func (p *StatusPatcher) patchStatus(ctx context.Context, obj *kclv1.KCLArtifact) error {
	// Condition messages quote revisions, Kustomization statuses and programs, which tenants
	// write: whatever shows them gets inert text (WithConditionMessages).
	if p.messages != nil {
		for i := range obj.Status.Conditions {
			obj.Status.Conditions[i].Message = p.messages(obj.Status.Conditions[i].Message)
		}
	}
	if equality.Semantic.DeepEqual(p.before.Status, obj.Status) {
		return nil
	}
	opts := &client.SubResourcePatchOptions{PatchOptions: client.PatchOptions{FieldManager: p.fieldOwner}}
	if equality.Semantic.DeepEqual(p.before.Status.Conditions, obj.Status.Conditions) {
		// Like the helper's status patch: the fields are ours alone, no lock needed.
		rv, err := SendStatus(ctx, p.client, obj, statusMergePatch{from: p.before.Status}, opts)
		if err == nil {
			obj.SetResourceVersion(rv)
		}
		return err
	}
	return p.patchWithConditions(ctx, obj, opts)
}

// patchWithConditions sends the status with an optimistic lock; a conflict means someone else
// wrote the object since it was read, so our condition changes are merged into theirs.
func (p *StatusPatcher) patchWithConditions(ctx context.Context, obj *kclv1.KCLArtifact, opts *client.SubResourcePatchOptions) error {
	diff := conditions.NewPatch(p.before, obj)
	base := p.before
	return wait.ExponentialBackoff(conflictBackoff, func() (bool, error) {
		want := obj.Status.DeepCopy()
		if base != p.before {
			merged := base.DeepCopy()
			if err := diff.Apply(merged, conditions.WithOwnedConditions(p.owned...)); err != nil {
				return false, err
			}
			want.Conditions = merged.Status.Conditions
		}
		if base.ResourceVersion == "" {
			return false, fmt.Errorf("cannot lock the status patch of %s: no resourceVersion", client.ObjectKeyFromObject(base))
		}
		target := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: base.Name, Namespace: base.Namespace}, Status: *want}
		rv, err := SendStatus(ctx, p.client, target, statusMergePatch{from: base.Status, lockedTo: base.ResourceVersion}, opts)
		switch {
		case apierrors.IsConflict(err):
			latest := &kclv1.KCLArtifact{}
			if err := p.client.Get(ctx, client.ObjectKeyFromObject(obj), latest); err != nil {
				return false, err
			}
			base = latest
			return false, nil
		case err != nil:
			return false, err
		}
		obj.SetResourceVersion(rv)
		obj.Status.Conditions = want.Conditions
		return true, nil
	})
}

// SendStatus sends patch, computed for obj, to obj's status and returns the new resourceVersion.
// Only the metadata is read back: the answer to a status write is otherwise the whole object,
// which nothing here needs, and decoding it was a tenth of a re-publish's client time.
func SendStatus(ctx context.Context, c client.Client, obj client.Object, patch client.Patch, opts *client.SubResourcePatchOptions) (string, error) {
	data, err := patch.Data(obj)
	if err != nil {
		return "", err
	}
	gvk, err := apiutil.GVKForObject(obj, c.Scheme())
	if err != nil {
		return "", err
	}
	target := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: obj.GetName(), Namespace: obj.GetNamespace()}}
	target.SetGroupVersionKind(gvk)
	if err := c.Status().Patch(ctx, target, client.RawPatch(patch.Type(), data), opts); err != nil {
		return "", err
	}
	return target.GetResourceVersion(), nil
}
