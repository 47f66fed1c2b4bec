package rendercmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/arguments"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fluxbuild"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kustomization"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/internal/phases"
	"github.com/kcl-flux/kcl-artifact-controller/internal/render"
)

// specFlags are the render flags a KCLArtifact sets itself: given with --kclartifact they would
// render something the controller does not.
var specFlags = []string{"setting", "overrides", "path_selector", "external", "sort_keys", "disable_none",
	"show_hidden", "strict_range_check", "format"}

// fromKCLArtifact reports whether the inputs come from a KCLArtifact rather than from the flags.
func (f *flags) fromKCLArtifact() bool { return f.kclArtifact != "" || f.kclArtifactFile != "" }

// checkKCLArtifactFlags refuses flags that a KCLArtifact sets: the only positional argument is
// the checkout of its source.
func (f *flags) checkKCLArtifactFlags(changed func(string) bool, inputs []string) error {
	for _, name := range specFlags {
		if changed(name) {
			return fmt.Errorf("--%s cannot be used with --kclartifact: the KCLArtifact sets it", name)
		}
	}
	if len(inputs) > 1 {
		return errors.New("with --kclartifact, the only argument is the directory the source is checked out in")
	}
	f.sourceDir = "."
	if len(inputs) == 1 {
		f.sourceDir = inputs[0]
	}
	return nil
}

// readKCLArtifactFile returns the KCLArtifact of a manifest file: the only one in it, or the one
// --kclartifact names. A file that does not exist returns nil and no error: on the older side of
// an offline diff, the KCLArtifact is new.
func readKCLArtifactFile(path, want, defaultNamespace string) (*kclv1.KCLArtifact, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	docs, err := manifests.Parse(b, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var found []*kclv1.KCLArtifact
	for _, d := range docs {
		if d.GroupVersionKind().GroupKind() != kclv1.GroupVersion.WithKind(kclv1.KCLArtifactKind).GroupKind() {
			continue
		}
		obj := &kclv1.KCLArtifact{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(d.Object, obj); err != nil {
			return nil, fmt.Errorf("%s: KCLArtifact %s: %w", path, d.GetName(), err)
		}
		if obj.Namespace == "" {
			obj.Namespace = defaultNamespace
		}
		if want == "" || want == obj.Name || want == obj.Namespace+"/"+obj.Name {
			found = append(found, obj)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) == 0 && want != "":
		return nil, fmt.Errorf("%s has no KCLArtifact %s", path, want)
	case len(found) == 0:
		return nil, fmt.Errorf("%s has no KCLArtifact", path)
	}
	return nil, fmt.Errorf("%s has %d KCLArtifacts: name one with --kclartifact", path, len(found))
}

// withArguments returns the arguments with those of -D over them.
func withArguments(args, over []render.Argument) []render.Argument {
	out := slices.Clone(args)
	for _, a := range over {
		if i := slices.IndexFunc(out, func(b render.Argument) bool { return b.Name == a.Name }); i >= 0 {
			out[i] = a
		} else {
			out = append(out, a)
		}
	}
	return out
}

// kclArtifactApplied renders the KCLArtifact's program from the checkout srcDir, with its
// arguments and -D over them, and returns what its Kustomizations (ks) would apply. c reads
// argumentsFrom and postBuild.substituteFrom; it is nil offline, where the caller has dropped
// argumentsFrom.
func kclArtifactApplied(ctx context.Context, f flags, obj *kclv1.KCLArtifact, srcDir string, c client.Client,
	ks kustomizationOf, log io.Writer) ([]*unstructured.Unstructured, error) {
	output, err := kclArtifactRendered(ctx, f, obj, srcDir, c, log)
	if err != nil {
		return nil, err
	}
	return asApplied(ctx, output, phases.Phase(f.phase), ks, c)
}

// kclArtifactRendered renders the KCLArtifact's program from the checkout srcDir with its
// arguments (argumentsFrom read with c) and -D over them, and returns the output.
func kclArtifactRendered(ctx context.Context, f flags, obj *kclv1.KCLArtifact, srcDir string, c client.Client,
	log io.Writer) (string, error) {
	// the user's own credentials bound what is read: any kind they may read
	res, err := (&arguments.Gatherer{Reader: c, Kinds: arguments.AnyKind()}).Gather(ctx, obj)
	if err != nil {
		return "", fmt.Errorf("KCLArtifact %s/%s: %w", obj.Namespace, obj.Name, err)
	}
	f.secrets.add(res.Sensitive)
	return renderKCLArtifact(ctx, f, obj, srcDir, withArguments(res.Args, f.opts.Arguments), log)
}

// runKCLArtifact prints what a KCLArtifact renders from the checkout of its source, as its
// artifact holds it. What the program prints goes to stderr: stdout is the output alone.
func runKCLArtifact(f flags, stdout, stderr io.Writer) error {
	ctx := context.Background()
	obj, c, err := f.kclArtifactToRender(ctx, stderr)
	if err != nil {
		return err
	}
	output, err := kclArtifactRendered(ctx, f, obj, f.sourceDir, c, stderr)
	if err != nil {
		return err
	}
	return f.print(&render.Result{Output: output}, stdout)
}

// kclArtifactToRender returns the KCLArtifact to render and a client of the cluster for its
// argumentsFrom. A manifest file without argumentsFrom needs no cluster: the client is nil.
func (f *flags) kclArtifactToRender(ctx context.Context, log io.Writer) (*kclv1.KCLArtifact, client.Client, error) {
	if f.kclArtifactFile == "" {
		cl, err := connect(f.diff, log)
		if err != nil {
			return nil, nil, err
		}
		obj, err := cl.kclArtifact(ctx, *f)
		return obj, cl.client, err
	}
	obj, err := readKCLArtifactFileFound(f.kclArtifactFile, f.kclArtifact, namespaceOf(f.kclArtifact, ""))
	if err != nil {
		return nil, nil, err
	}
	if len(obj.Spec.ArgumentsFrom) == 0 {
		if obj.Namespace == "" {
			obj.Namespace = offlineNamespace
		}
		return obj, nil, nil
	}
	cl, err := connect(f.diff, log)
	if err != nil {
		return nil, nil, fmt.Errorf("KCLArtifact %s has argumentsFrom: %w", obj.Name, err)
	}
	if obj.Namespace == "" {
		obj.Namespace = cl.namespace
	}
	return obj, cl.client, nil
}

// namespaceOf is the namespace of a [namespace/]name, or fallback.
func namespaceOf(name, fallback string) string {
	if ns, _, ok := strings.Cut(name, "/"); ok {
		return ns
	}
	return fallback
}

// renderKCLArtifact renders the KCLArtifact's program from the checkout srcDir as the controller
// renders it from the source: spec.path, entries, settings, options, and these argument values.
func renderKCLArtifact(ctx context.Context, f flags, obj *kclv1.KCLArtifact, srcDir string, args []render.Argument,
	log io.Writer) (string, error) {
	srcDir, err := filepath.Abs(srcDir)
	if err != nil {
		return "", err
	}
	pkgDir, err := securejoin.SecureJoin(srcDir, obj.Spec.Path)
	if err != nil {
		return "", fmt.Errorf("spec.path %q: %w", obj.Spec.Path, err)
	}
	if fi, err := os.Stat(pkgDir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("spec.path %q is not a directory in %s", obj.Spec.Path, srcDir)
	}
	opts := render.SpecOptions(obj.Spec)
	opts.Root, opts.Dir, opts.Arguments, opts.Debug = srcDir, pkgDir, args, f.opts.Debug
	f.opts = opts
	eng, cleanup, err := f.engine(ctx)
	if err != nil {
		return "", err
	}
	defer cleanup()
	res, err := render.Render(ctx, eng, f.opts)
	if err != nil {
		return "", f.shown(err)
	}
	_, err = io.WriteString(log, res.Log)
	return res.Output, err
}

// kustomizationOf returns the Kustomization that applies a phase: a nil one means the objects
// are applied as they are rendered.
type kustomizationOf func(p phases.Phase) (*kustomizev1.Kustomization, error)

// fromTemplate is the Kustomization the controller generates for a phase, from the template
// alone: what applies without a cluster to read it from.
func fromTemplate(obj *kclv1.KCLArtifact) kustomizationOf {
	return func(p phases.Phase) (*kustomizev1.Kustomization, error) {
		if t := obj.Spec.Kustomization; t != nil && t.Disabled {
			return nil, nil
		}
		return &kustomizev1.Kustomization{
			ObjectMeta: metav1.ObjectMeta{Name: kustomization.Name(obj, p), Namespace: obj.Namespace},
			Spec:       kustomization.Spec(obj),
		}, nil
	}
}

// asApplied returns the objects of a rendered output as kustomize-controller would apply them:
// split into deploy phases as the artifact holds them (the Jobs of pre and post stamped with the
// output's revision), each phase built with its Kustomization. With only set, one phase.
func asApplied(ctx context.Context, output string, only phases.Phase, ks kustomizationOf, c client.Client) (
	[]*unstructured.Unstructured, error) {
	scratch, err := os.MkdirTemp("", "kcl-render-diff-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	files := map[phases.Phase]*os.File{}
	defer func() {
		for _, fh := range files {
			fh.Close()
		}
	}()
	var ferr error
	split, err := manifests.StreamPhases(strings.NewReader(output), func(p phases.Phase) io.Writer {
		if files[p] == nil {
			fh, err := create(filepath.Join(scratch, string(p), "manifests.yaml"))
			if err != nil {
				ferr = err
				return io.Discard
			}
			files[p] = fh
		}
		return files[p]
	}, 0, manifests.OutputRevision(output))
	if err = errors.Join(err, ferr); err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, p := range phases.All {
		if split.Counts[p] == 0 || (only != "" && p != only) {
			continue
		}
		if err := files[p].Close(); err != nil {
			return nil, err
		}
		objs, err := buildPhase(ctx, filepath.Join(scratch, string(p)), p, ks, c)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, nil
}

func buildPhase(ctx context.Context, dir string, p phases.Phase, ks kustomizationOf, c client.Client) (
	[]*unstructured.Unstructured, error) {
	k, err := ks(p)
	if err != nil {
		return nil, err
	}
	if k == nil {
		b, err := os.ReadFile(filepath.Join(dir, "manifests.yaml"))
		if err != nil {
			return nil, err
		}
		return manifests.Parse(b, 0)
	}
	objs, err := fluxbuild.Build(ctx, dir, k, c)
	if err != nil {
		return nil, fmt.Errorf("phase %s, as Kustomization %s/%s builds it: %w", p, k.Namespace, k.Name, err)
	}
	return objs, nil
}

func create(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	return os.Create(path)
}
