package controller

import (
	"context"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promotion"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
	"github.com/kcl-flux/kcl-artifact-controller/internal/render"
)

// step is one concern of the reconcile: it reads the spec fields of that concern, writes its
// status fields, and leaves in the pipeline what the steps after it need.
type step struct {
	name string
	run  func(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) error
	// always: the step runs after a failed one too (the failure is the reconcile's).
	always bool
	// keepsPublished: a failure of this step, which comes before the publish step, leaves the
	// generated objects applying the last good artifact, and what someone else changed of them
	// is put back (keepPublished).
	keepsPublished bool
}

// pipeline is what the steps of one reconcile hand each other.
type pipeline struct {
	// wasFailing: Ready said a failure before this reconcile (a success is then a recovery).
	wasFailing bool
	// hold is the reconcile's part of the output budget (nil: no budget).
	hold *outputHold
	// retryAll (reset step): the Kustomizations' verdicts so far are not counted.
	retryAll bool
	// pinned (pin step): a kept artifact is published instead of a render.
	pinned bool
	// rejections (rejections step) are the releases rejected in the pipeline.
	rejections []promotion.Rejection
	// in (inputs step) is what the render depends on; upToDate tells that the artifact stored,
	// or one waiting, is theirs already.
	in       *inputs
	upToDate bool
	// rendered (render step) is a new artifact, stored but not yet the current one;
	// renderErr inputs that could not be read or rendered, which a later step may go past (a
	// stage's proven waiting artifact is still promoted).
	rendered  *rendered
	renderErr error
	// promoted (promotion step) is the waiting artifact a stage published; promoteAt is when a
	// closed gate opens by itself.
	promoted  *promoted
	promoteAt time.Time
	// publish (restore step) is spec.publish.oci, which the push step pushes to.
	publish *kclv1.OCIPublish
	// published: the latest link moved to another artifact, which is announced.
	published bool
	// live (publish step) are the generated Kustomizations, in phase order.
	live []*kustomizev1.Kustomization
	// retryAt (push and verify steps) is when a failed push is tried again, or the checks run.
	retryAt time.Time
	// collectAt (history step) is when an artifact no longer listed may be removed.
	collectAt time.Time
	// failedStep is the step whose failure is the reconcile's.
	failedStep step
}

// retryNoLaterThan has the reconcile come back by t at the latest (retryAt).
func (p *pipeline) retryNoLaterThan(t time.Time) {
	if p.retryAt.IsZero() || t.Before(p.retryAt) {
		p.retryAt = t
	}
}

// deferFailure leaves a failure of the inputs or the render that a later step may go past
// (kreconcile.Deferrable) in renderErr, and returns any other.
func (p *pipeline) deferFailure(err error) error {
	if kreconcile.Deferrable(err) {
		p.renderErr = err
		return nil
	}
	return err
}

// sensitive are the argument values read from Secrets, masked in what events name.
func (p *pipeline) sensitive() []string {
	if p.in == nil {
		return nil
	}
	return p.in.secretValues
}

// record is what the history records of the inputs of the artifact this reconcile published;
// nil otherwise, where the entry keeps what it recorded.
func (p *pipeline) record() []kclv1.InputValue {
	switch {
	case !p.published:
		return nil
	case p.promoted != nil:
		return p.promoted.waiting.Inputs
	case p.in != nil:
		return p.in.record
	}
	return nil
}

// inputs is everything a render depends on.
type inputs struct {
	source meta.Artifact
	// kind is the source's kind, for the provenance of what is pushed.
	kind string
	// origin is the source's address, for the artifact's metadata.
	origin string
	args   []render.Argument
	// secretValues are the argument values read from Secrets, masked in the new-artifact
	// summary; like args, never stored or logged.
	secretValues []string
	// record is what the history keeps of the arguments: Secret values masked.
	record []kclv1.InputValue
	// digest identifies the inputs: equal digests render equal output.
	digest string
}

// rendered is an artifact a render stored, with what status says of it once it is current.
type rendered struct {
	art     *meta.Artifact
	refs    []kclv1.ObjectReference
	counts  map[phases.Phase]int
	phased  bool
	exports []kclv1.ExportedValue
}

// promoted is a waiting artifact a stage published this reconcile, with the upstream's proof.
type promoted struct {
	waiting kclv1.WaitingArtifact
	record  kclv1.PromotionRecord
}
