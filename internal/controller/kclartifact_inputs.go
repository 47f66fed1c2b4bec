package controller

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fluxcd/pkg/apis/acl"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/promotion"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
	"github.com/kcl-flux/kcl-artifact-controller/internal/render"
	"github.com/kcl-flux/kcl-artifact-controller/internal/source"
)

// reconcileInputs reads what the render depends on: the source's artifact and the arguments
// (spec.sourceRef, spec.argumentsFrom, spec.arguments), and tells whether the artifact stored,
// or one rendered ahead and waiting, is theirs already. A pinned KCLArtifact reads none.
func (r *KCLArtifactReconciler) reconcileInputs(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	if p.pinned {
		return nil
	}
	in, err := r.gatherInputs(ctx, obj)
	if err != nil {
		// as a failed render: a stage still promotes what it rendered before
		return p.deferFailure(err)
	}
	obj.Status.LastAttemptedRevision = in.source.Revision
	if rj := promotion.Rejected(p.rejections, in.source.Revision, in.record); rj != nil {
		// as a failed render: what is served stays, and a stage still promotes what waits
		return p.deferFailure(kreconcile.Fail(kclv1.ReleaseRejectedReason, fmt.Errorf("%s: these inputs are not published", rj)))
	}
	p.in = in
	p.upToDate = in.digest == obj.Status.InputDigest && r.Store.Holds(obj, obj.Status.Artifact) || r.waitingFor(obj, in.digest)
	return nil
}

func (r *KCLArtifactReconciler) gatherInputs(ctx context.Context, obj *kclv1.KCLArtifact) (*inputs, error) {
	key := source.Key(obj)
	if r.NoCrossNamespaceRefs && key.Namespace != obj.GetNamespace() {
		return nil, &kreconcile.Error{Reason: acl.AccessDeniedReason, Stalled: true, Err: fmt.Errorf(
			"cross-namespace references are not allowed: %s %s is not in namespace %s",
			obj.Spec.SourceRef.Kind, key, obj.GetNamespace())}
	}
	src, err := source.Get(ctx, r.sourceReader(obj), obj)
	if apierrors.IsNotFound(err) {
		return nil, kreconcile.Failf(kclv1.SourceNotFoundReason, "%s %s not found", obj.Spec.SourceRef.Kind, key)
	}
	if err != nil {
		return nil, err
	}
	art := src.GetArtifact()
	if art == nil || art.URL == "" {
		return nil, kreconcile.Failf(kclv1.SourceNotReadyReason, "%s %s has no artifact yet", obj.Spec.SourceRef.Kind, key)
	}
	g := &arguments.Gatherer{Reader: r.Client, Kinds: r.ArgumentKinds, NoImagePolicies: r.NoImagePolicies,
		ExpressionBudget: r.Bounds.ExpressionBudget}
	res, err := g.Gather(ctx, obj)
	if err != nil {
		return nil, argumentsError(err)
	}
	in := &inputs{source: *art, kind: obj.Spec.SourceRef.Kind, origin: source.URL(src), args: res.Args,
		secretValues: res.Sensitive, record: res.Inputs}
	in.digest = inputDigest(r.Store.Keyed, art.Digest, obj, res.Args, r.EngineVersion)
	return in, nil
}

// sourceReader reads the KCLArtifact's source: from the cache, but an ExternalArtifact, which the
// cache holds as metadata only (docs/benchmarks.md#ten-thousand), from the API server: one GET
// per reconcile of a KCLArtifact whose source is an ExternalArtifact. A cached read of it would
// start a second informer holding every ExternalArtifact whole.
func (r *KCLArtifactReconciler) sourceReader(obj *kclv1.KCLArtifact) client.Reader {
	if obj.Spec.SourceRef.Kind == sourcev1.ExternalArtifactKind {
		return r.uncached()
	}
	return r.Client
}

// argumentsError gives a failed argumentsFrom its condition reason; an API error without one is
// transient.
func argumentsError(err error) error {
	if e := arguments.AsError(err); e != nil {
		return &kreconcile.Error{Reason: e.Reason, Stalled: e.Stalled, Err: err}
	}
	return err
}

// keyedFunc is artifactstore.Store.Keyed: a digest under a key only the controller holds.
type keyedFunc func(purpose string, parts ...string) string

// inputDigest digests the source digest, the render options of the spec, the argument values and
// the engine version, for the KCLArtifact's namespace, under the controller's key (keyed): the
// argument values are digested, never stored, and the digest (status.inputDigest,
// waiting[].inputDigest) tells a reader nothing of them. Unkeyed, a viewer who knows everything
// else (the source's digest, the arguments' names, the engine string of the release) found a
// 4-digit Secret value in milliseconds (issue 54). The same inputs give the same digest across
// restarts that keep the storage, whose directory holds the key; equal inputs of two KCLArtifacts
// of a namespace give the same digest (their renders are shared), of two namespaces never.
func inputDigest(keyed keyedFunc, sourceDigest string, obj *kclv1.KCLArtifact, args []render.Argument, engine string) string {
	s := obj.Spec
	doc := struct {
		Source, Engine, Path                    string
		Entries, Settings, Overrides, Selectors []string
		Args                                    []render.Argument
		Flags                                   [4]bool
		Exports                                 []kclv1.Export `json:",omitempty"`
	}{sourceDigest, engine, s.Path, s.Entries, s.Settings, s.Overrides, s.PathSelectors, args,
		[4]bool{s.SortKeys, s.ShowHidden, s.DisableNone, s.StrictRangeCheck}, s.Exports}
	b, _ := json.Marshal(doc)
	return keyed("input-digest", obj.GetNamespace(), string(b))
}
