package fluxplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/signature"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact/ociartifacttest"
	"github.com/kcl-flux/kcl-artifact-controller/internal/provenance"
)

// pushed is an artifact in the registry as spec.publish.oci leaves it.
type pushed struct {
	ref            name.Digest
	artifactDigest string
}

// pushSigned writes, as the controller's push does, the artifact image of content, its
// signature (by s, nil for none) and its provenance attestation to repo.
func pushSigned(t *testing.T, repo name.Repository, content string, s signature.Signer) pushed {
	t.Helper()
	path, artifactDigest := ociartifacttest.Tarball(t, content)
	img, err := ociartifact.Image(path, ociartifact.Meta{Source: "https://git.example/app.git", Revision: "main@" + artifactDigest})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	ref := repo.Digest(d.String())
	write := func(tag string, img v1.Image) {
		if err := remote.Write(repo.Tag(tag), img); err != nil {
			t.Fatal(err)
		}
	}
	write("production", img)
	if s != nil {
		sig, err := ociartifact.SignatureImage(s, ref)
		if err != nil {
			t.Fatal(err)
		}
		write(ociartifact.SignatureTag(d), sig)
		st, err := provenance.Statement(provenance.Build{Repository: repo.Name(), Manifest: d.String(), SourceKind: "GitRepository",
			SourceURL: "https://git.example/app.git", SourceRevision: "main@sha1:" + strings.Repeat("7", 40), Path: "app",
			Arguments: map[string]string{"env": "prod", "password": "***"}, Engine: "v0.11.2",
			Controller: "https://github.com/kcl-flux/kcl-artifact-controller", ControllerVersion: "test"})
		if err != nil {
			t.Fatal(err)
		}
		att, err := ociartifact.AttestationImage(s, st)
		if err != nil {
			t.Fatal(err)
		}
		write(ociartifact.AttestationTag(d), att)
	}
	return pushed{ref: ref, artifactDigest: artifactDigest}
}

func keyPair(t *testing.T, dir, name string) (signature.Signer, string) {
	t.Helper()
	priv, pub, err := ociartifact.GenerateKeyPair([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ociartifact.LoadSigner(priv, []byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pub, 0o600); err != nil {
		t.Fatal(err)
	}
	return s, p
}

// flux kcl verify checks, in a real registry, the signature and provenance of what a
// KCLArtifact's history says was pushed, and prints the provenance; another key, an unsigned
// artifact and a signature replayed from another artifact are refused, each with its reason.
func TestVerifyChecksTheRegistry(t *testing.T) {
	fluxBinary(t)
	cfg, kc := startClusterConfig(t)
	ctx := context.Background()
	installCRDs(t, cfg)
	c := newClient(t, cfg)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}}); err != nil {
		t.Fatal(err)
	}
	reg := kclmodtest.StartRegistry(t, "", "")
	repo, err := name.NewRepository(reg.Host+"/fleet/app", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	signer, pub := keyPair(t, dir, "cosign.pub")
	_, otherPub := keyPair(t, dir, "other.pub")
	good := pushSigned(t, repo, "kind: ConfigMap\n", signer)
	unsigned := pushSigned(t, repo, "kind: Secret\n", nil)
	replayed := pushSigned(t, repo, "kind: Deployment\n", nil)
	// the attacker copies good's signature to the replayed artifact's signature tag
	sig, err := remote.Image(repo.Tag(ociartifact.SignatureTag(ociartifacttest.Hash(t, good.ref))))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(repo.Tag(ociartifact.SignatureTag(ociartifacttest.Hash(t, replayed.ref))), sig); err != nil {
		t.Fatal(err)
	}

	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "fleet"},
		Spec: kclv1.KCLArtifactSpec{SourceRef: kclv1.SourceReference{Kind: "GitRepository", Name: "app"},
			Interval: metav1.Duration{Duration: time.Minute},
			Publish:  &kclv1.Publish{OCI: &kclv1.OCIPublish{URL: "oci://" + repo.Name(), Insecure: true}}}}
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	entry := func(p pushed) kclv1.ArtifactHistoryEntry {
		return kclv1.ArtifactHistoryEntry{Digest: p.artifactDigest, URL: "http://x/a.tar.gz", LastPublished: now,
			OCI: &kclv1.OCIRecord{URL: "oci://" + repo.Name(), Digest: p.ref.DigestStr(), Tag: "production", Signed: true, PushedAt: now}}
	}
	obj.Status = kclv1.KCLArtifactStatus{Artifact: &meta.Artifact{Path: "a.tar.gz", URL: "http://x/a.tar.gz",
		Revision: "main@" + good.artifactDigest, Digest: good.artifactDigest, LastUpdateTime: now},
		History: []kclv1.ArtifactHistoryEntry{entry(good), entry(unsigned), entry(replayed), entry(pushed{ref: good.ref, artifactDigest: digestC})}}
	if err := c.Status().Update(ctx, obj); err != nil {
		t.Fatal(err)
	}

	r := flux(t, kc, "kcl", "verify", "app", "-n", "fleet", "--key", pub)
	if r.code != 0 {
		t.Fatalf("verify of the signed artifact: exit %d, %s", r.code, r.stderr)
	}
	for _, want := range []string{"Verified " + good.ref.String(), "revision:     main@sha1:" + strings.Repeat("7", 40),
		"argument:     password=***", "engine:       v0.11.2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("verify printed\n%s\nwithout %q", r.stdout, want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--key", otherPub}, good.ref.String() + ": no signature verifies with the key"},
		{[]string{unsigned.artifactDigest, "--key", pub}, "not signed"},
		{[]string{replayed.ref.DigestStr(), "--key", pub}, "names digest " + good.ref.DigestStr()},
		// status names good's signed push for another artifact of the history
		{[]string{digestC, "--key", pub}, "is signed, but it is not artifact " + digestC},
	} {
		r := flux(t, kc, append([]string{"kcl", "verify", "app", "-n", "fleet"}, c.args...)...)
		if r.code != 1 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("verify %v: exit %d, stderr %q; want exit 1 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}
