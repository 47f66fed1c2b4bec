package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// The pull layout of a fleet: the hub renders and pushes signed OCI artifacts
// (spec.publish.oci); each spoke runs its own Flux, whose source-controller pulls the moving tag
// and verifies the cosign signature with the public key, and whose kustomize-controller applies
// it. The spoke is shared by the tests of this file, each in its own namespace.
var fleet struct {
	once  sync.Once
	spoke *fluxenv.Spoke
	err   error
}

// fleetSpoke starts the spoke with its own Flux once; Env.Stop stops it.
func fleetSpoke(t *testing.T) *fluxenv.Spoke {
	t.Helper()
	fleet.once.Do(func() {
		start := time.Now()
		fleet.spoke, fleet.err = suite.env.StartFluxSpoke("fleet")
		if fleet.err == nil {
			t.Logf("spoke with its own source-controller and kustomize-controller ready in %s", time.Since(start).Round(time.Millisecond))
		}
	})
	if fleet.err != nil {
		t.Fatal(fleet.err)
	}
	return fleet.spoke
}

// keyPassword encrypts the cosign keys of these tests.
const keyPassword = "fleet-key-pw"

// cosignKeySecret makes a cosign key pair and the Secret `cosign generate-key-pair
// k8s://ns/name` would write; it returns the Secret and the public key.
func cosignKeySecret(t *testing.T, ns, name string) (*corev1.Secret, []byte) {
	t.Helper()
	priv, pub, err := ociartifact.GenerateKeyPair([]byte(keyPassword))
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data: map[string][]byte{"cosign.key": priv, "cosign.pub": pub, "cosign.password": []byte(keyPassword)}}, pub
}

// publishSigned sets up, in the hub's namespace ns, a Git repository of p, its GitRepository, a
// cosign key Secret and KCLArtifact "app" pushing signed to the suite registry's repository
// <ns>/app under tag. Its Kustomization is disabled: the hub applies nothing, the spoke pulls.
// It returns the public key and the source revision.
func publishSigned(t *testing.T, ns, tag string, p program) ([]byte, string) {
	t.Helper()
	rev := gitRevision(createRepo(t, ns, p.files()))
	createGitRepository(t, ns, "app", ns)
	secret, pub := cosignKeySecret(t, ns, "cosign")
	create(t, secret)
	obj := newKCLArtifact(ns, "app", "app", nil)
	obj.Spec.Kustomization = &kclv1.KustomizationTemplate{Disabled: true}
	obj.Spec.Publish = signedPublish(ns+"/app", tag, "cosign")
	create(t, obj)
	return pub, rev
}

// signedPublish pushes to the suite registry's repository repo under tag, signed with the cosign
// key in Secret keySecret.
func signedPublish(repo, tag, keySecret string) *kclv1.Publish {
	return &kclv1.Publish{OCI: &kclv1.OCIPublish{URL: suite.env.Registry.URL(repo), Tag: tag,
		Insecure: true, Sign: &kclv1.OCISign{SecretRef: kclv1.LocalObjectReference{Name: keySecret}}}}
}

// waitPushed waits until KCLArtifact ns/name has published sourceRevision and pushed it signed,
// and returns the record and when the test saw it (at most one poll late).
func waitPushed(t *testing.T, ns, name, sourceRevision string) (*kclv1.OCIRecord, time.Time) {
	t.Helper()
	obj := &kclv1.KCLArtifact{}
	waitFor(t, ns, fmt.Sprintf("KCLArtifact %s/%s to push its artifact of %s, signed", ns, name, sourceRevision),
		func(ctx context.Context) (bool, string, error) {
			if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
				return false, "", err
			}
			state := kclArtifactState(obj) + "; " +
				conditionString(apimeta.FindStatusCondition(obj.Status.Conditions, kclv1.PushFailedCondition))
			// history[0]'s revision, not status.sourceRevision: a stage's may be a waiting one's
			if len(obj.Status.History) == 0 || obj.Status.History[0].SourceRevision != sourceRevision ||
				obj.Status.Artifact == nil || obj.Status.History[0].Digest != obj.Status.Artifact.Digest {
				return false, state, nil
			}
			rec := obj.Status.History[0].OCI
			if rec == nil {
				return false, state + "; not pushed", nil
			}
			return rec.Signed, fmt.Sprintf("%s; pushed %s@%s signed %v", state, rec.URL, rec.Digest, rec.Signed), nil
		})
	return obj.Status.History[0].OCI, time.Now()
}

// spokeFollow creates, in the spoke's namespace ns, OCIRepository name following tag of the
// suite registry's repository repo, verified with the cosign public key in Secret keySecret, and
// Kustomization name applying it (prune, wait).
func spokeFollow(t *testing.T, spoke *fluxenv.Spoke, ns, name, repo, tag, keySecret string) {
	t.Helper()
	or := &sourcev1.OCIRepository{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: sourcev1.OCIRepositorySpec{
			URL:       suite.env.Registry.URL(repo),
			Reference: &sourcev1.OCIRepositoryRef{Tag: tag},
			Insecure:  true,
			Verify: &sourcev1.OCIRepositoryVerification{Provider: "cosign",
				SecretRef: &meta.LocalObjectReference{Name: keySecret}},
			Interval: metav1.Duration{Duration: 2 * time.Second},
			Timeout:  &metav1.Duration{Duration: 30 * time.Second},
		},
	}
	ks := &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kustomizev1.KustomizationSpec{
			SourceRef: kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.OCIRepositoryKind, Name: name},
			Path:      "./",
			Prune:     true,
			Wait:      true,
			Interval:  metav1.Duration{Duration: time.Minute},
			Timeout:   &metav1.Duration{Duration: 30 * time.Second},
		},
	}
	for _, obj := range []client.Object{or, ks} {
		if err := spoke.Client.Create(t.Context(), obj); err != nil {
			t.Fatalf("creating %T %s/%s in the spoke: %v", obj, ns, name, err)
		}
	}
}

// spokeNamespace creates namespace ns in the spoke with Secret keySecret holding pub as
// cosign.pub, as an OCIRepository's spec.verify.secretRef reads it.
func spokeNamespace(t *testing.T, spoke *fluxenv.Spoke, ns, keySecret string, pub []byte) {
	t.Helper()
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: keySecret, Namespace: ns}, Data: map[string][]byte{"cosign.pub": pub}},
	} {
		if err := spoke.Client.Create(t.Context(), obj); err != nil {
			t.Fatalf("creating %T %s in the spoke: %v", obj, obj.GetName(), err)
		}
	}
}

// waitSpoke is waitFor on the spoke: on timeout it adds what the spoke's controllers logged.
func waitSpoke(t *testing.T, spoke *fluxenv.Spoke, ns, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	if err := fluxenv.WaitFor(t.Context(), waitTimeout, what, cond); err != nil {
		var b strings.Builder
		for _, p := range []*fluxenv.Process{spoke.SourceController, spoke.KustomizeController} {
			writeLogLines(&b, p.Name, p.LogPath, ns)
		}
		t.Fatalf("%v\n%s%s", err, b.String(), diagnostics(ns))
	}
}

// waitVerified waits until the spoke's OCIRepository ns/name says SourceVerified=status about
// the manifest digest (when False, Ready=False too), and returns the OCIRepository.
func waitVerified(t *testing.T, spoke *fluxenv.Spoke, ns, name string, status metav1.ConditionStatus, digest string) *sourcev1.OCIRepository {
	t.Helper()
	or := &sourcev1.OCIRepository{}
	waitSpoke(t, spoke, ns, fmt.Sprintf("OCIRepository %s/%s in the spoke SourceVerified=%s about %s", ns, name, status, digest),
		func(ctx context.Context) (bool, string, error) {
			if err := spoke.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, or); err != nil {
				return false, "", err
			}
			c := apimeta.FindStatusCondition(or.Status.Conditions, sourcev1.SourceVerifiedCondition)
			state := conditionString(c) + "; " + artifactString(or.Status.Artifact)
			if c == nil || c.Status != status {
				return false, state, nil
			}
			if status == metav1.ConditionTrue {
				// the True message does not name the digest; the artifact it stored does
				return or.Status.Artifact != nil && strings.HasSuffix(or.Status.Artifact.Revision, "@"+digest), state, nil
			}
			// source-controller sets SourceVerified before it sums up in Ready
			ready := apimeta.FindStatusCondition(or.Status.Conditions, meta.ReadyCondition)
			state += "; " + conditionString(ready)
			return strings.Contains(c.Message, digest) && ready != nil && ready.Status == metav1.ConditionFalse, state, nil
		})
	return or
}

// waitSpokeConfigMap waits until the spoke has ConfigMap ns/name with exactly data.
func waitSpokeConfigMap(t *testing.T, spoke *fluxenv.Spoke, ns, name string, data map[string]string) {
	t.Helper()
	waitSpoke(t, spoke, ns, fmt.Sprintf("ConfigMap %s/%s in the spoke with data %v", ns, name, data),
		configMapHas(spoke.Client, ns, name, data))
}

// expectSpokeRefused checks a refusal by the spoke's source-controller: SourceVerified=False
// naming the digest, and Ready=False; the artifact it had before (none, or keep) kept. It logs
// the exact messages.
func expectSpokeRefused(t *testing.T, spoke *fluxenv.Spoke, ns, name, digest string, keep *meta.Artifact) {
	t.Helper()
	or := waitVerified(t, spoke, ns, name, metav1.ConditionFalse, digest)
	c := apimeta.FindStatusCondition(or.Status.Conditions, sourcev1.SourceVerifiedCondition)
	t.Logf("spoke's source-controller refused %s/%s (%s): SourceVerified=False reason %s: %s; %s", ns, name, digest, c.Reason, c.Message,
		conditionString(apimeta.FindStatusCondition(or.Status.Conditions, meta.ReadyCondition)))
	if !strings.Contains(c.Message, "failed to verify the signature using provider 'cosign'") {
		t.Errorf("OCIRepository %s/%s: SourceVerified message %q, want a cosign verification failure", ns, name, c.Message)
	}
	switch got := or.Status.Artifact; {
	case keep == nil && got != nil:
		t.Errorf("OCIRepository %s/%s stored %s from a refused artifact", ns, name, artifactString(got))
	case keep != nil && (got == nil || got.Revision != keep.Revision):
		t.Errorf("OCIRepository %s/%s: %s after the refusal, want the last verified %s", ns, name, artifactString(got), keep.Revision)
	}
}

// attackerDir is a directory of one ConfigMap manifest, content an attacker pushes.
func attackerDir(t *testing.T, ns, name string) string {
	t.Helper()
	return writeFiles(t, map[string]string{"configmap.yaml": fmt.Sprintf(
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: %s\ndata:\n  from: attacker\n", name, ns)})
}

// pushAttacker pushes an attacker's ConfigMap name (as `flux push artifact` does, unsigned) to
// the suite registry's repo:tag and returns the manifest digest.
func pushAttacker(t *testing.T, ns, repo, tag, name string) string {
	t.Helper()
	digest, err := suite.env.Registry.PushArtifact(t.Context(), repo, tag, attackerDir(t, ns, name), "https://attacker.example/x", "main@sha1:0")
	if err != nil {
		t.Fatal(err)
	}
	return digest
}

// registryRef is repo@digest in the suite registry (plain HTTP).
func registryRef(t *testing.T, repo, digest string) name.Digest {
	t.Helper()
	ref, err := name.NewDigest(suite.env.Registry.Image(repo)+"@"+digest, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// signatureTagOf is the cosign signature tag of repo@digest.
func signatureTagOf(t *testing.T, repo, digest string) name.Tag {
	t.Helper()
	h, err := v1.NewHash(digest)
	if err != nil {
		t.Fatal(err)
	}
	return registryRef(t, repo, digest).Context().Tag(ociartifact.SignatureTag(h))
}

// signWithOtherKey signs repo@digest, in cosign's layout, with a key the spoke does not trust.
func signWithOtherKey(t *testing.T, repo, digest string) {
	t.Helper()
	priv, _, err := ociartifact.GenerateKeyPair([]byte(keyPassword))
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ociartifact.LoadSigner(priv, []byte(keyPassword))
	if err != nil {
		t.Fatal(err)
	}
	img, err := ociartifact.SignatureImage(signer, registryRef(t, repo, digest))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(signatureTagOf(t, repo, digest), img, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
}

// TestFleetPullsSignedArtifacts: the hub's KCLArtifact pushes signed artifacts under the moving
// tag "production" and applies nothing itself; the spoke's own Flux verifies the signature with
// the public key and applies them, and follows a new commit. The spoke's source-controller
// refuses an unsigned artifact, one signed with another key, and a manifest an attacker with
// registry write access pushes under the moving tag, keeping what it applied last.
func TestFleetPullsSignedArtifacts(t *testing.T) {
	t.Parallel()
	spoke := fleetSpoke(t)
	ns := newNamespace(t, "fleet")
	repo := ns + "/app"
	pub, rev1 := publishSigned(t, ns, "production", program{version: "1"})
	spokeNamespace(t, spoke, ns, "cosign-pub", pub)
	rec1, seen := waitPushed(t, ns, "app", rev1)
	spokeFollow(t, spoke, ns, "app", repo, "production", "cosign-pub")

	or := waitVerified(t, spoke, ns, "app", metav1.ConditionTrue, rec1.Digest)
	t.Logf("spoke's source-controller: %s", conditionString(apimeta.FindStatusCondition(or.Status.Conditions, sourcev1.SourceVerifiedCondition)))
	want := map[string]string{"env": "dev", "greeting": "hello", "version": "1"}
	waitSpokeConfigMap(t, spoke, ns, "app-config", want)
	logPublishToSpoke(t, "first commit", rec1, seen)
	expectNotInCluster(t, suite.env.Client, "the hub", ns, "app-config")

	// a new commit: the hub pushes it and moves the tag, the spoke follows
	rev2 := commit(t, ns, "version 2", program{version: "2"}.files())
	rec2, seen := waitPushed(t, ns, "app", rev2)
	if rec2.Digest == rec1.Digest {
		t.Fatalf("the second commit was pushed as %s, the first's digest", rec2.Digest)
	}
	want["version"] = "2"
	waitSpokeConfigMap(t, spoke, ns, "app-config", want)
	logPublishToSpoke(t, "second commit", rec2, seen)
	applied := waitVerified(t, spoke, ns, "app", metav1.ConditionTrue, rec2.Digest).Status.Artifact
	ks := &kustomizev1.Kustomization{}
	waitSpoke(t, spoke, ns, "Kustomization app in the spoke Ready having applied "+applied.Revision,
		kustomizationApplied(spoke.Client, ns, "app", applied.Revision, ks))
	expectNotInCluster(t, suite.env.Client, "the hub", ns, "app-config")

	// (a) unsigned, as `flux push artifact` pushes without `cosign sign`
	unsigned := pushAttacker(t, ns, repo, "unsigned", "unsigned-config")
	spokeFollow(t, spoke, ns, "unsigned", repo, "unsigned", "cosign-pub")
	// (b) signed, in cosign's layout, with a key the spoke does not trust
	otherKey := pushAttacker(t, ns, repo, "other-key", "other-key-config")
	signWithOtherKey(t, repo, otherKey)
	spokeFollow(t, spoke, ns, "other-key", repo, "other-key", "cosign-pub")
	expectSpokeRefused(t, spoke, ns, "unsigned", unsigned, nil)
	expectSpokeRefused(t, spoke, ns, "other-key", otherKey, nil)
	expectNotInCluster(t, spoke.Client, "the spoke", ns, "unsigned-config")
	expectNotInCluster(t, spoke.Client, "the spoke", ns, "other-key-config")

	// (c) an attacker with write access to the registry moves the tag to a manifest of their own
	tampered := pushAttacker(t, ns, repo, "production", "tampered-config")
	expectSpokeRefused(t, spoke, ns, "app", tampered, applied)
	expectConfigMapIn(t, spoke.Client, "the spoke", ns, "app-config", want)
	expectNotInCluster(t, spoke.Client, "the spoke", ns, "tampered-config")
	if err := spoke.Client.Get(t.Context(), client.ObjectKeyFromObject(ks), ks); err != nil {
		t.Fatal(err)
	}
	if ks.Status.LastAppliedRevision != applied.Revision {
		t.Errorf("Kustomization app in the spoke: %s after the refusal, want %s applied last", kustomizationState(ks), applied.Revision)
	}
}

// logPublishToSpoke logs the time from the hub's push to the object applied in the spoke: from
// when the test saw the push in the KCLArtifact's status (at most one poll late), and from
// status.history[0].oci.pushedAt (second precision).
func logPublishToSpoke(t *testing.T, what string, rec *kclv1.OCIRecord, seen time.Time) {
	t.Helper()
	t.Logf("figure: %s, hub push -> ConfigMap applied in the spoke (OCIRepository interval 2s): %s from the push seen in status; %s from pushedAt %s",
		what, time.Since(seen).Round(10*time.Millisecond), time.Since(rec.PushedAt.Time).Round(100*time.Millisecond),
		rec.PushedAt.UTC().Format(time.RFC3339))
}

// TestFleetSignatureReplay documents a known gap of source-controller v1.9.6: its cosign key
// verification checks that a signature verifies with the key, never that the signed payload
// names the manifest being verified (no ClaimVerifier). So an attacker with registry write
// access who copies the .sig image of a signed artifact A to the signature tag of an unsigned
// artifact B of their own (`sha256-<B>.sig`) makes the spoke accept and apply B. Should
// source-controller start refusing it, this test fails and the documentation must be updated.
// ociartifact.Verify (`flux kcl verify`) compares the payload's digest and refuses it.
func TestFleetSignatureReplay(t *testing.T) {
	t.Parallel()
	spoke := fleetSpoke(t)
	ns := newNamespace(t, "replay")
	repo := ns + "/app"
	pub, rev := publishSigned(t, ns, "production", program{version: "1"})
	spokeNamespace(t, spoke, ns, "cosign-pub", pub)
	recA, _ := waitPushed(t, ns, "app", rev)

	b := pushAttacker(t, ns, repo, "replayed", "replayed-config")
	src, dst := signatureTagOf(t, repo, recA.Digest), signatureTagOf(t, repo, b)
	if err := crane.Copy(src.String(), dst.String(), crane.Insecure, crane.WithContext(t.Context())); err != nil {
		t.Fatalf("copying %s to %s: %v", src, dst, err)
	}
	spokeFollow(t, spoke, ns, "replayed", repo, "replayed", "cosign-pub")
	or := waitVerified(t, spoke, ns, "replayed", metav1.ConditionTrue, b)
	t.Logf("known gap: the spoke's source-controller accepted %s with the signature of %s: %s", b, recA.Digest,
		conditionString(apimeta.FindStatusCondition(or.Status.Conditions, sourcev1.SourceVerifiedCondition)))
	waitSpokeConfigMap(t, spoke, ns, "replayed-config", map[string]string{"from": "attacker"})

	v, err := ociartifact.LoadVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ociartifact.Verify(registryRef(t, repo, recA.Digest), v, remote.WithContext(t.Context())); err != nil {
		t.Errorf("ociartifact.Verify of the hub's own artifact %s: %v", recA.Digest, err)
	}
	_, err = ociartifact.Verify(registryRef(t, repo, b), v, remote.WithContext(t.Context()))
	if !errors.Is(err, ociartifact.ErrReplayedSignature) {
		t.Fatalf("ociartifact.Verify of %s with %s's signature: %v, want ErrReplayedSignature", b, recA.Digest, err)
	}
	t.Logf("ociartifact.Verify refuses it: %v", err)
}
