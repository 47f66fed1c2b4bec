package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	ctrl "sigs.k8s.io/controller-runtime"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/internal/render"
)

// build fetches the source, renders the program, checks the output and stores the artifact.
// Status changes only when all of it succeeded.
func (r *KCLArtifactReconciler) build(ctx context.Context, obj *kclv1.KCLArtifact, in *inputs) error {
	tmp, err := os.MkdirTemp("", "kclartifact-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	srcDir, outDir := filepath.Join(tmp, "source"), filepath.Join(tmp, "out")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		return err
	}
	if err := r.Fetcher.Fetch(ctx, &in.source, srcDir); err != nil {
		return fail(kclv1.FetchFailedReason, err)
	}
	output, err := r.render(ctx, obj, in, srcDir)
	if err != nil {
		return err
	}
	objs, err := manifests.Parse([]byte(output))
	if err != nil {
		return fail(kclv1.InvalidOutputReason, err)
	}
	if err := manifests.Write(outDir, objs); err != nil {
		return fail(kclv1.StorageFailedReason, err)
	}
	art, err := r.Store.Publish(obj, revisionRef(in.source.Revision), outDir, manifests.FileName)
	if err != nil {
		return fail(kclv1.StorageFailedReason, err)
	}
	art.Metadata = map[string]string{originRevisionKey: in.source.Revision}
	// The same content publishes nothing new: the ExternalArtifact keeps its revision, so
	// kustomize-controller has nothing to apply.
	if prev := obj.Status.Artifact; prev == nil || prev.Digest != art.Digest {
		r.event(obj, eventNormal, "NewArtifact", fmt.Sprintf("stored artifact %s rendered from %s", art.Revision, in.source.Revision))
		obj.Status.Artifact = art
	}
	obj.Status.InputDigest = in.digest
	obj.Status.SourceRevision = in.source.Revision
	obj.Status.Inventory = manifests.Inventory(objs)
	ctrl.LoggerFrom(ctx).Info("artifact stored", "revision", art.Revision, "objects", len(objs))
	return nil
}

// originRevisionKey carries the source revision to kustomize-controller, which reports it as the
// origin revision of what it applied.
const originRevisionKey = "org.opencontainers.image.revision"

// revisionRef is the ref part of a Flux revision (`main@sha1:…` → `main`), `latest` when the
// source revision has none.
func revisionRef(sourceRevision string) string {
	if ref, _, ok := strings.Cut(sourceRevision, "@"); ok && ref != "" {
		return ref
	}
	return "latest"
}

func (r *KCLArtifactReconciler) render(ctx context.Context, obj *kclv1.KCLArtifact, in *inputs, srcDir string) (string, error) {
	pkgDir, err := securejoin.SecureJoin(srcDir, obj.Spec.Path)
	if err != nil {
		return "", failf(kclv1.RenderFailedReason, "invalid path %q: %v", obj.Spec.Path, err)
	}
	if fi, err := os.Stat(pkgDir); err != nil || !fi.IsDir() {
		return "", failf(kclv1.RenderFailedReason, "path %q not found in %s", obj.Spec.Path, in.source.Revision)
	}
	externals, release, err := r.dependencies(ctx, obj, pkgDir, srcDir)
	if err != nil {
		return "", err
	}
	defer release()
	if r.Renders != nil {
		r.Renders()
	}
	s := obj.Spec
	res, err := render.Render(ctx, r.Engine, render.Options{
		Inputs: s.Entries, Dir: pkgDir, Arguments: in.args, Settings: s.Settings,
		Overrides: s.Overrides, PathSelectors: s.PathSelectors, SortKeys: s.SortKeys,
		DisableNone: s.DisableNone, ShowHidden: s.ShowHidden, StrictRangeCheck: s.StrictRangeCheck,
		Externals: externals, Format: render.FormatYAML,
	})
	if err != nil {
		// Paths in KCL messages point into a temporary directory: make them relative to the source.
		msg := strings.ReplaceAll(err.Error(), srcDir+string(filepath.Separator), "")
		return "", fail(kclv1.RenderFailedReason, errors.New(redact(msg, in.args)))
	}
	return res.Output, nil
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
