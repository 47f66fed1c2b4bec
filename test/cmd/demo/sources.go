package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/cmd/devcluster/devstate"
)

// otherSource is the demo program rendered from a source kind other than Git.
type otherSource struct {
	kind, name, env, path string
	source                client.Object // the Flux source, created by setSpec
	setSpec               func()
	yamlURL               string // filled in once it is rendered
	diffURL               string // filled in by changeAndDiff
}

// otherSources are the demo's fixture from the OCI registry (as `flux push artifact` pushed it)
// and from the S3 bucket, each with its own env so that its objects stand beside prod's.
func (d *demo) otherSources() []*otherSource {
	oci := &sourcev1.OCIRepository{ObjectMeta: metav1.ObjectMeta{Name: appName + "-oci", Namespace: namespace}}
	bucket := &sourcev1.Bucket{ObjectMeta: metav1.ObjectMeta{Name: appName + "-bucket", Namespace: namespace}}
	return []*otherSource{
		{kind: sourcev1.OCIRepositoryKind, name: oci.Name, env: "staging", source: oci, setSpec: func() {
			oci.Spec = sourcev1.OCIRepositorySpec{
				URL: d.st.Artifacts[repoName], Reference: &sourcev1.OCIRepositoryRef{Tag: devstate.FixtureTag},
				Insecure: true, Interval: metav1.Duration{Duration: 10 * time.Second},
			}
		}},
		{kind: sourcev1.BucketKind, name: bucket.Name, env: "dev", path: repoName, source: bucket, setSpec: func() {
			bucket.Spec = sourcev1.BucketSpec{
				Provider: sourcev1.BucketProviderGeneric, BucketName: devstate.FixtureBucket,
				Endpoint: d.st.S3.Endpoint, Insecure: true, SecretRef: &meta.LocalObjectReference{Name: bucket.Name},
				Interval: metav1.Duration{Duration: 10 * time.Second},
			}
		}},
	}
}

// runOtherSources creates the other sources and their KCLArtifacts and waits until they are
// rendered and applied.
func (d *demo) runOtherSources() ([]*otherSource, error) {
	sources := d.otherSources()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: appName + "-bucket", Namespace: namespace}}
	if _, err := d.upsert(secret, func() {
		secret.Data = map[string][]byte{"accesskey": []byte(d.st.S3.AccessKey), "secretkey": []byte(d.st.S3.SecretKey)}
	}); err != nil {
		return nil, err
	}
	for _, s := range sources {
		if _, err := d.upsert(s.source, s.setSpec); err != nil {
			return nil, err
		}
		ka := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: namespace}}
		res, err := d.upsert(ka, func() { ka.Spec = d.kclArtifactSpec(s.kind, s.name, s.path, s.env) })
		if err != nil {
			return nil, err
		}
		fmt.Printf("demo: %s %s/%s and KCLArtifact %s/%s %s (env=%s)\n", s.kind, namespace, s.name, namespace, s.name, res, s.env)
	}
	for _, s := range sources {
		if err := d.waitApplied(s.name); err != nil {
			return nil, err
		}
		ka := &kclv1.KCLArtifact{}
		if err := d.c.Get(d.ctx, client.ObjectKey{Namespace: namespace, Name: s.name}, ka); err != nil {
			return nil, err
		}
		s.yamlURL = d.serverURL(ka, "latest.yaml")
		if _, err := d.fetch(s.yamlURL); err != nil {
			return nil, err
		}
	}
	return sources, nil
}

// waitApplied waits until KCLArtifact name is Ready and its Kustomization applied its artifact.
func (d *demo) waitApplied(name string) error {
	ka := &kclv1.KCLArtifact{}
	return d.wait("KCLArtifact "+namespace+"/"+name+" rendered and applied", kustomizeController, func(ctx context.Context) (bool, string, error) {
		if err := d.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, ka); err != nil {
			return false, "", err
		}
		s := readyState(ka.Status.Conditions, ka.Generation, ka.Status.ObservedGeneration)
		if ka.Status.Artifact == nil || !ready(ka.Status.Conditions, ka.Generation, ka.Status.ObservedGeneration) {
			return false, s, nil
		}
		applied := conditionTrue(ka.Status.Conditions, kclv1.KustomizationReadyCondition)
		return applied, fmt.Sprintf("artifact %s from %s; KustomizationReady=%v", ka.Status.Artifact.Revision, ka.Status.SourceRevision, applied), nil
	})
}

// changeAndDiff changes the arguments of KCLArtifact name (replicas=2), waits until the new
// artifact is applied, and returns the artifact server's diff of the change.
func (d *demo) changeAndDiff(s *otherSource) (string, error) {
	name := s.name
	ka := &kclv1.KCLArtifact{}
	if err := d.c.Get(d.ctx, client.ObjectKey{Namespace: namespace, Name: name}, ka); err != nil {
		return "", err
	}
	before := ka.Status.Artifact.Digest
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"arguments":{"replicas":"2"}}}`))
	if err := d.c.Patch(d.ctx, ka, patch); err != nil {
		return "", fmt.Errorf("changing KCLArtifact %s/%s: %w", namespace, name, err)
	}
	fmt.Printf("demo: KCLArtifact %s/%s patched: arguments replicas=2\n", namespace, name)
	if err := d.wait("KCLArtifact "+namespace+"/"+name+" re-rendered", kclController, func(ctx context.Context) (bool, string, error) {
		if err := d.c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, ka); err != nil {
			return false, "", err
		}
		return ka.Status.Artifact != nil && ka.Status.Artifact.Digest != before, readyState(ka.Status.Conditions, ka.Generation, ka.Status.ObservedGeneration), nil
	}); err != nil {
		return "", err
	}
	if err := d.waitApplied(name); err != nil {
		return "", err
	}
	s.diffURL = d.serverURL(ka, "diff")
	return d.fetch(s.diffURL)
}

// otherSourcesText is the closing text's section on them.
func otherSourcesText(sources []*otherSource) string {
	var b strings.Builder
	b.WriteString("Other sources: the same program from an OCI registry (pushed as `flux push artifact` does) and\nfrom an S3 bucket (source-controller's generic provider):\n\n")
	for _, s := range sources {
		fmt.Fprintf(&b, "  %-14s %-15s %s\n", s.kind, s.name, s.yamlURL)
	}
	return b.String()
}
