package rendercmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/fluxcd/pkg/tar"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kcl-flux/kcl-artifact-controller/internal/yamldiff"
)

// offlineNamespace is the namespace of a KCLArtifact manifest without one, as kubectl would apply it.
const offlineNamespace = "default"

// diffOffline compares the render of another checkout (older) with that of the current one
// (newer), with no cluster: what a pull request changes.
func diffOffline(ctx context.Context, f flags, log io.Writer) (*yamldiff.Result, error) {
	if f.kclArtifact != "" && f.kclArtifactFile == "" {
		return nil, errors.New("--diff-from has no cluster to read --kclartifact from: give its manifest with --kclartifact-file")
	}
	other, cleanup, err := checkout(ctx, f.diff.from)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	older, err := sideObjects(ctx, f, other, log)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", f.diff.from, err)
	}
	newer, err := sideObjects(ctx, f, "", log)
	if err != nil {
		return nil, err
	}
	res, err := yamldiff.Objects(stripAll(older), stripAll(newer), yamldiff.Options{ShowSecrets: f.diff.showSecrets,
		Sensitive: f.secrets.all()})
	return &res, err
}

// sideObjects renders one side of an offline diff. base is the directory standing for the
// current one in the other checkout ("" for the current checkout): relative paths of the
// command line resolve against it.
func sideObjects(ctx context.Context, f flags, base string, log io.Writer) ([]*unstructured.Unstructured, error) {
	if !f.fromKCLArtifact() {
		if base != "" {
			f.opts.Dir = base
			if f.sandbox {
				f.opts.Root = base
			}
		}
		return renderObjects(ctx, f, log)
	}
	obj, err := readKCLArtifactFile(rebase(f.kclArtifactFile, base), f.kclArtifact, namespaceOf(f.kclArtifact, offlineNamespace))
	if err != nil || obj == nil {
		return nil, err
	}
	if len(obj.Spec.ArgumentsFrom) > 0 {
		fmt.Fprintf(log, "KCLArtifact %s/%s: spec.argumentsFrom needs a cluster and is left out (give such arguments with -D)\n",
			obj.Namespace, obj.Name)
		obj.Spec.ArgumentsFrom = nil
	}
	return kclArtifactApplied(ctx, f, obj, rebase(f.sourceDir, base), nil, fromTemplate(obj), log)
}

// rebase resolves a relative path of the command line in the other checkout.
func rebase(path, base string) string {
	if base == "" || filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(base, path)
}

// checkout returns the directory that stands for the current one in the other checkout: a
// directory as given, or for a Git revision of the current repository, its tree extracted into a
// temporary directory that cleanup removes.
func checkout(ctx context.Context, from string) (dir string, cleanup func(), err error) {
	noop := func() {}
	if fi, err := os.Stat(from); err == nil && fi.IsDir() {
		abs, err := filepath.Abs(from)
		return abs, noop, err
	}
	prefix, err := git(ctx, "rev-parse", "--show-prefix")
	if err != nil {
		return "", noop, fmt.Errorf("--diff-from %q is not a directory, and the current directory is not in a Git repository: %w", from, err)
	}
	if _, err := git(ctx, "rev-parse", "--verify", "--quiet", from+"^{commit}"); err != nil {
		return "", noop, fmt.Errorf("--diff-from %q is neither a directory nor a revision of this Git repository", from)
	}
	tmp, err := os.MkdirTemp("", "kcl-render-diff-from-")
	if err != nil {
		return "", noop, err
	}
	cleanup = func() { os.RemoveAll(tmp) }
	top, err := git(ctx, "rev-parse", "--show-toplevel")
	if err != nil {
		cleanup()
		return "", noop, err
	}
	cmd := exec.CommandContext(ctx, "git", "archive", "--format=tar.gz", from)
	cmd.Dir = top
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err == nil {
		// Untar refuses entries that would land outside tmp; the rest of the pipe is read, so
		// that git is never left blocked on a full pipe.
		err = tar.Untar(out, tmp)
		_, _ = io.Copy(io.Discard, out)
		err = errors.Join(err, cmd.Wait())
	}
	if err != nil {
		cleanup()
		return "", noop, fmt.Errorf("git archive %s: %w %s", from, err, strings.TrimSpace(stderr.String()))
	}
	return filepath.Join(tmp, strings.TrimSpace(prefix)), cleanup, nil
}

// git runs git in the current directory and returns its output, or its error message.
func git(ctx context.Context, args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// stripAll strips what normalization writes and no one applies (creationTimestamp: null).
func stripAll(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		out[i] = strip(o)
	}
	return out
}
