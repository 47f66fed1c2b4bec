package controller

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/depfetch"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fairshare"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/provenance"
	kreconcile "github.com/kcl-flux/kcl-artifact-controller/internal/reconcile"
	"github.com/kcl-flux/kcl-artifact-controller/internal/staging"
)

// dependencies resolves the package's kcl.mod dependencies and stages them beside the source,
// where the render's worker can read them; it returns them as the engine's externals. Remote ones
// are fetched by a process of the namespace's own (depfetch), never in this one.
func (r *KCLArtifactReconciler) dependencies(ctx context.Context, obj *kclv1.KCLArtifact, pkgDir string, stage *staging.Dir) ([]kcllib.ExternalPkg, []provenance.Dependency, error) {
	if r.Deps == nil {
		return nil, nil, nil
	}
	creds, err := r.credentials(ctx, obj)
	if err != nil {
		return nil, nil, kreconcile.Fail(kclv1.DependencyFailedReason, err)
	}
	res, err := r.Deps.Resolve(ctx, depfetch.Request{Domain: obj.GetNamespace(), PkgDir: pkgDir, SourceRoot: stage.Source(),
		ReadRoots: []string{stage.Source()}, Deps: stage.Deps, Creds: creds})
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), stage.Source()+string(filepath.Separator), "")
		return nil, nil, kreconcile.Fail(kclv1.DependencyFailedReason, fairshare.KeepCut(err, errors.New(msg)))
	}
	defer res.Release()
	for _, w := range res.Warnings {
		r.event(obj, eventWarning, kclv1.DependencyFailedReason, w)
	}
	if res.NeedsStaging() {
		deps, err := stage.Deps()
		if err == nil {
			err = res.Stage(deps)
		}
		if err != nil {
			return nil, nil, kreconcile.Fail(kclv1.DependencyFailedReason, err)
		}
	}
	return res.ExternalPkgs(), provenanceDeps(res.Packages), nil
}

// provenanceDeps are the packages resolved, as the provenance of a pushed artifact names them.
func provenanceDeps(pkgs []kclmod.Package) []provenance.Dependency {
	out := make([]provenance.Dependency, 0, len(pkgs))
	for _, p := range pkgs {
		out = append(out, provenance.Dependency{Name: p.Name, Version: p.Version, Source: p.Location, Digest: p.Digest, Sum: p.Sum})
	}
	return out
}

// credentials reads the Secrets the KCLArtifact names; their content never leaves this call.
func (r *KCLArtifactReconciler) credentials(ctx context.Context, obj *kclv1.KCLArtifact) (kclmod.Credentials, error) {
	var creds kclmod.Credentials
	if ref := obj.Spec.RegistrySecretRef; ref != nil {
		data, err := r.secretData(ctx, obj.GetNamespace(), ref.Name)
		if err != nil {
			return creds, err
		}
		var ok bool
		if creds.DockerConfigJSON, ok = kclmod.DockerConfigFromSecretData(data); !ok {
			return creds, fmt.Errorf("registrySecretRef: Secret %s/%s has no .dockerconfigjson", obj.GetNamespace(), ref.Name)
		}
	}
	for _, g := range obj.Spec.GitCredentials {
		data, err := r.secretData(ctx, obj.GetNamespace(), g.SecretRef.Name)
		if err != nil {
			return creds, err
		}
		auth, ok := kclmod.GitAuthFromSecretData(data)
		if !ok {
			return creds, fmt.Errorf("gitCredentials: Secret %s/%s has none of username/password, bearerToken or ca.crt", obj.GetNamespace(), g.SecretRef.Name)
		}
		if creds.Git == nil {
			creds.Git = map[string]kclmod.GitAuth{}
		}
		creds.Git[g.Host] = auth
	}
	return creds, nil
}

func (r *KCLArtifactReconciler) secretData(ctx context.Context, ns, name string) (map[string][]byte, error) {
	var s corev1.Secret
	if err := r.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", ns, name, err)
	}
	return s.Data, nil
}
