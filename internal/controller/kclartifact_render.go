package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	securejoin "github.com/cyphar/filepath-securejoin"
	ctrl "sigs.k8s.io/controller-runtime"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/internal/metrics"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
	"github.com/kcl-flux/kcl-artifact-controller/internal/remediation"
	"github.com/kcl-flux/kcl-artifact-controller/internal/render"
	"github.com/kcl-flux/kcl-artifact-controller/internal/staging"
	"github.com/kcl-flux/kcl-artifact-controller/internal/yamldiff"
)

// reconcileRender renders the inputs and stores the artifact, unless the artifact stored (or one
// waiting) is theirs already. The new artifact is not the current one yet: the promotion step
// decides whether it is published or waits. A failed render that a later step may go past (a
// stage's proven waiting artifact is still promoted) is left in the pipeline, not returned.
func (r *KCLArtifactReconciler) reconcileRender(ctx context.Context, obj *kclv1.KCLArtifact, p *pipeline) error {
	if p.in == nil || p.upToDate {
		return nil
	}
	rd, err := r.build(ctx, obj, p.in, p.hold)
	if err != nil {
		return p.deferFailure(err)
	}
	p.rendered = rd
	return nil
}

// build fetches the source, renders the program, checks the output and stores the artifact. nil
// without an error: the inputs render the quarantined artifact, and the one published stays.
func (r *KCLArtifactReconciler) build(ctx context.Context, obj *kclv1.KCLArtifact, in *inputs, hold *outputHold) (*rendered, error) {
	out, err := r.shared.do(sharedKey(obj, in.digest), func() (renderOutput, error) {
		return r.stageAndRender(ctx, obj, in, hold)
	})
	output := out.yaml
	if err != nil {
		return nil, err
	}
	// The checked objects never go through the staging area, which workers read.
	files := &artifactFiles{}
	defer files.Close()
	// What a KCLArtifact that reads Secrets renders may hold their values: every hash of it a
	// reader sees is keyed (issue 54). The Jobs' revision (read by whoever reads Jobs) is a keyed
	// digest of the output, and the artifact holds a keyed salt, which makes its file name,
	// digest and revision (status, history, ExternalArtifact, Kustomization) hashes of content no
	// reader can compute, whatever the guesses it renders.
	readsSecrets := len(arguments.SecretInputs(obj)) > 0
	revision := manifests.OutputRevision(output)
	if readsSecrets {
		revision = r.Store.Keyed("output-revision", obj.GetNamespace()+"/"+obj.GetName(), revision)
	}
	split, err := writeManifests(files, output, r.MaxObjects, revision)
	if err != nil {
		return nil, err
	}
	exports, err := renderedExports(ctx, obj, output, r.MaxObjects, r.Bounds.ExpressionBudget)
	if err != nil {
		return nil, err
	}
	list := files.list(split)
	if readsSecrets {
		list = r.Store.Salted(obj, list)
	}
	art, err := r.Store.StoreFiles(obj, kclv1.RevisionRef(in.source.Revision), list)
	if err != nil {
		return nil, kreconcile.Fail(kclv1.StorageFailedReason, err)
	}
	if len(split.Skipped) > 0 {
		ctrl.LoggerFrom(ctx).Info("objects left out: their hooks do not run here (deletion, rollback, tests)", "objects", refNames(split.Skipped))
	}
	if q := remediation.QuarantinedAs(obj, art.Digest); q != nil {
		// Rendered again from other inputs, the failed artifact stays where the rollback put it:
		// the one published stays, and these inputs are not rendered again.
		if !r.Store.Holds(obj, obj.Status.Artifact) {
			return nil, kreconcile.Failf(kclv1.StorageFailedReason, "the artifact rolled back to, %s, is no longer in storage%s, and the inputs render the quarantined artifact %s: "+
				"set reconcile.fluxcd.io/resetAt to publish it again, or commit a fix", q.RolledBackTo, artifactstore.MissingHint, q.Revision)
		}
		obj.Status.InputDigest = in.digest
		ctrl.LoggerFrom(ctx).Info("the inputs render the quarantined artifact: staying rolled back",
			"revision", art.Revision, "servedRevision", obj.Status.Artifact.Revision)
		return nil, nil
	}
	r.renders.remember(obj, art.Digest, renderRecord{sourceKind: in.kind, sourceURL: in.origin,
		sourceDigest: in.source.Digest, path: obj.Spec.Path, deps: out.deps})
	return &rendered{art: art, refs: split.Refs, counts: split.Counts, phased: split.Phased(), exports: exports}, nil
}

func refNames(refs []kclv1.ObjectReference) []string {
	var out []string
	for _, r := range refs {
		out = append(out, yamldiff.ID(r.Kind, r.Namespace, r.Name))
	}
	return out
}

// stageAndRender stages the source and dependencies for one render and renders.
func (r *KCLArtifactReconciler) stageAndRender(ctx context.Context, obj *kclv1.KCLArtifact, in *inputs, hold *outputHold) (renderOutput, error) {
	fetchCtx, cancel := bounded(ctx, r.Bounds.FetchTimeout)
	stage, err := r.stage(fetchCtx, obj.GetNamespace(), in)
	cancel()
	if err != nil {
		return renderOutput{}, err
	}
	defer stage.Remove()
	return r.render(ctx, obj, in, stage, hold)
}

// stage gives the render its source: the namespace's shared tree of this revision, read in place
// (one download and unpack per namespace and revision); a copy of it when renders are not
// confined and could write to it; or, without a cache, a download of its own.
func (r *KCLArtifactReconciler) stage(ctx context.Context, namespace string, in *inputs) (*staging.Dir, error) {
	if r.Sources != nil && !r.Sources.Copies() {
		dir, release, err := r.Sources.Use(ctx, namespace, &in.source)
		if err != nil {
			return nil, kreconcile.Fail(kclv1.FetchFailedReason, err)
		}
		stage, err := r.Staging.Shared(namespace, dir, release)
		if err != nil {
			release()
			return nil, kreconcile.Fail(kclv1.StorageFailedReason, err)
		}
		return stage, nil
	}
	stage, err := r.Staging.New(namespace)
	if err != nil {
		return nil, kreconcile.Fail(kclv1.StorageFailedReason, err)
	}
	if r.Sources != nil {
		err = r.Sources.Stage(ctx, namespace, &in.source, stage.Source())
	} else {
		err = r.Fetcher.Fetch(ctx, &in.source, stage.Source())
	}
	if err != nil {
		stage.Remove()
		return nil, kreconcile.Fail(kclv1.FetchFailedReason, err)
	}
	return stage, nil
}

// writeManifests checks the rendered output and writes its objects to the files of their phases
// as it reads them: the output is held once (as the engine answered it), never parsed whole. The
// pre and post Jobs carry revision, the output's digest, which changes with every new artifact.
func writeManifests(files *artifactFiles, output string, maxObjects int, revision string) (*manifests.Split, error) {
	split, err := manifests.StreamPhases(strings.NewReader(output), files.of, maxObjects, revision)
	var tooMany *manifests.TooManyObjectsError
	switch {
	case errors.As(err, &tooMany):
		return nil, kreconcile.Fail(kclv1.OutputLimitExceededReason, err)
	case err != nil:
		return nil, kreconcile.Fail(kclv1.InvalidOutputReason, err)
	}
	return split, nil
}

// artifactFiles are the contents of an artifact, one per phase.
type artifactFiles struct {
	byPhase map[phases.Phase]*artifactstore.Content
}

func (f *artifactFiles) of(p phases.Phase) io.Writer {
	if f.byPhase == nil {
		f.byPhase = map[phases.Phase]*artifactstore.Content{}
	}
	c, ok := f.byPhase[p]
	if !ok {
		c = artifactstore.NewContent()
		f.byPhase[p] = c
	}
	return c
}

// list is the artifact's files: manifests.yaml at the root when every object is in main (an
// empty one for no objects, as ever), else <phase>/manifests.yaml per phase present, in name
// order; and when a rollback places objects otherwise, both rollback/<phase>/manifests.yaml, even
// empty: their presence says that a rollback applies them instead of pre and post.
func (f *artifactFiles) list(split *manifests.Split) []artifactstore.File {
	if !split.Phased() {
		f.of(phases.Main)
		return []artifactstore.File{{Name: manifests.FileName, Content: f.byPhase[phases.Main]}}
	}
	if split.RollbackApart {
		f.of(phases.RollbackPre)
		f.of(phases.RollbackPost)
	}
	var out []artifactstore.File
	for p, c := range f.byPhase {
		if split.RollbackApart || (p != phases.RollbackPre && p != phases.RollbackPost) {
			out = append(out, artifactstore.File{Name: phases.Dir(p) + "/" + manifests.FileName, Content: c})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Close removes what the contents spilled to disk.
func (f *artifactFiles) Close() {
	for _, c := range f.byPhase {
		c.Close()
	}
}

// originRevisionKey carries the source revision to kustomize-controller, which reports it as the
// origin revision of what it applied.
const originRevisionKey = "org.opencontainers.image.revision"

func (r *KCLArtifactReconciler) render(ctx context.Context, obj *kclv1.KCLArtifact, in *inputs, stage *staging.Dir, hold *outputHold) (renderOutput, error) {
	srcDir := stage.Source()
	pkgDir, err := securejoin.SecureJoin(srcDir, obj.Spec.Path)
	if err != nil {
		return renderOutput{}, kreconcile.Failf(kclv1.RenderFailedReason, "invalid path %q: %v", obj.Spec.Path, err)
	}
	if fi, err := os.Stat(pkgDir); err != nil || !fi.IsDir() {
		return renderOutput{}, kreconcile.Failf(kclv1.RenderFailedReason, "path %q not found in %s", obj.Spec.Path, in.source.Revision)
	}
	externals, deps, err := r.dependencies(ctx, obj, pkgDir, stage)
	if err != nil {
		return renderOutput{}, err
	}
	if r.Renders != nil {
		r.Renders(obj.GetNamespace())
	}
	// The namespace is the trust domain: its workers read its staging root and nothing else.
	session := r.Engine.Session(kclworker.Domain{Name: obj.GetNamespace(), Roots: []string{stage.NamespaceRoot}}, pkgDir)
	session.YAMLOnly = true
	if hold != nil {
		session.Reserve = hold.reserve
	}
	start := time.Now()
	opts := render.SpecOptions(obj.Spec)
	opts.Root, opts.Dir, opts.Arguments = srcDir, pkgDir, in.args
	opts.Dependencies, opts.MaxOutput = externals, r.MaxOutput
	res, err := render.Render(ctx, session, opts)
	if err != nil {
		metrics.RecordRender(obj.GetNamespace(), start, 0, err)
		return renderOutput{}, renderFailure(err, stage, in.args)
	}
	metrics.RecordRender(obj.GetNamespace(), start, len(res.Output), nil)
	return renderOutput{yaml: res.Output, deps: deps}, nil
}

// renderFailure classifies a failed render. Paths in KCL messages point into the staging
// directory: they are made relative to the source (and deps/ for dependencies).
func renderFailure(err error, stage *staging.Dir, args []render.Argument) error {
	var outside *render.OutsideError
	if errors.As(err, &outside) {
		if outside.Field == "entries" || outside.Field == "settings" {
			outside.Field = "spec." + outside.Field
		}
		return kreconcile.Fail(kclv1.InvalidPathReason, outside)
	}
	var tooLarge *render.OutputTooLargeError
	var workerTooLarge *kclworker.OutputTooLargeError
	if errors.As(err, &tooLarge) || errors.As(err, &workerTooLarge) {
		return kreconcile.Fail(kclv1.OutputLimitExceededReason, fmt.Errorf("%w (--kcl-max-output-size)", err))
	}
	reason := kclv1.RenderFailedReason
	var werr *kclworker.WorkerError
	if errors.As(err, &werr) && werr.Reason == kclworker.ReasonProtocol {
		reason = kclv1.WorkerProtocolViolationReason
	}
	msg := strings.ReplaceAll(err.Error(), stage.Source()+string(filepath.Separator), "")
	if stage.Path != "" {
		msg = strings.ReplaceAll(msg, stage.Path+string(filepath.Separator), "")
	}
	return kreconcile.Fail(reason, fairshare.KeepCut(err, errors.New(redact(msg, args))))
}

// redact hides argument values that a KCL message may echo: they can come from Secrets.
func redact(msg string, args []render.Argument) string {
	for _, a := range args {
		if len(a.Value) >= 3 {
			msg = strings.ReplaceAll(msg, a.Value, "***")
		}
	}
	return msg
}
