package node

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/google/go-containerregistry/pkg/crane"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact"
)

const (
	// signedTag is the moving tag the publishing KCLArtifact pushes and the consumer follows.
	signedTag = "production"
	// signedKeyPassword encrypts the cosign key of TestSignedArtifactToRunningPods.
	signedKeyPassword = "node-signing-pw"
)

// TestSignedArtifactToRunningPods: the pull layout of a fleet on the real node. KCLArtifact app
// of namespace "signed" renders the demo application with its Kustomization disabled, pushes
// each artifact to the suite's registry on the node's address and signs it with the cosign key
// of its namespace. Namespace "pulled" is what a spoke cluster holds: only the public key, an
// OCIRepository verifying the moving tag with it, and a Kustomization applying it; Flux's own
// source-controller and kustomize-controller Pods do the rest, and the kubelet runs the Pods.
// (One node: the consumer is a namespace of the same cluster, as the issue allows; the e2e
// fleet tests run a second API server.) An editor of "signed" who has no key moves the tag to
// an unsigned artifact of its own: source-controller refuses it and the Pods keep answering.
func TestSignedArtifactToRunningPods(t *testing.T) {
	hub, consumer := newNamespace(t, "signed"), newNamespace(t, "pulled")
	reg := startNodeRegistry(t)
	repo := reg.host + "/" + hub + "/app"
	priv, pub, err := ociartifact.GenerateKeyPair([]byte(signedKeyPassword))
	if err != nil {
		t.Fatal(err)
	}
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: hub, Name: "cosign"},
		Data: map[string][]byte{"cosign.key": priv, "cosign.password": []byte(signedKeyPassword)}})
	create(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: consumer, Name: "cosign-pub"},
		Data: map[string][]byte{"cosign.pub": pub}})

	began := time.Now()
	sha := createRepo(t, hub, "signed", "node-app", map[string]string{"kcl.yaml": settingsFile(map[string]any{"message": "signed-v1"})})
	create(t, kclArtifact(hub, "app", "signed", func(o *kclv1.KCLArtifact) {
		o.Spec.Settings = []string{"kcl.yaml"}
		o.Spec.Kustomization = &kclv1.KustomizationTemplate{Disabled: true}
		o.Spec.Publish = &kclv1.Publish{OCI: &kclv1.OCIPublish{URL: "oci://" + repo, Tag: signedTag, Insecure: true,
			Sign: &kclv1.OCISign{SecretRef: kclv1.LocalObjectReference{Name: "cosign"}}}}
	}))
	rec := waitSignedPush(t, hub, gitRevision(sha))
	followSigned(t, consumer, "oci://"+repo)
	waitPulled(t, consumer, rec.Digest)
	waitAnswers(t, consumer, "signed-v1", "")
	figure("signed: KCLArtifact created to consumer's Pods", time.Since(began))
	figureCount("signed: bytes pushed per artifact (manifest, layer, signature, attestation)", pushedBytes(t, reg, hub, rec.Digest))
	if obj, err := getKCLArtifact(context.Background(), hub, "app"); err != nil || obj.Status.KustomizationRef != nil {
		t.Fatalf("the publishing KCLArtifact applies nothing itself: kustomizationRef %v, %v", obj.Status.KustomizationRef, err)
	}

	if !t.Run("a commit reaches the consumer's Pods", func(t *testing.T) {
		sha := commit(t, "signed", "message signed-v2", map[string]string{"kcl.yaml": settingsFile(map[string]any{"message": "signed-v2"})})
		rec := waitSignedPush(t, hub, gitRevision(sha))
		seen := time.Now()
		waitPulled(t, consumer, rec.Digest)
		waitAnswers(t, consumer, "signed-v2", "")
		figure("signed: push seen to consumer's Pods answering", time.Since(seen))
		pushBesideRender(t, hub)
	}) {
		return
	}

	t.Run("an unsigned artifact on the tag is refused and never runs", func(t *testing.T) {
		create(t, kclArtifact(hub, "forger", "signed", func(o *kclv1.KCLArtifact) {
			o.Spec.Arguments = map[string]string{"message": "forged"}
			o.Spec.Kustomization = &kclv1.KustomizationTemplate{Disabled: true}
			o.Spec.Publish = &kclv1.Publish{OCI: &kclv1.OCIPublish{URL: "oci://" + repo, Tag: signedTag, Insecure: true}}
		}))
		forged := waitPush(t, hub, "forger", false)
		msg := waitRefused(t, consumer, forged.Digest)
		logf("node: the consumer's source-controller refused the unsigned %s: %s", forged.Digest, msg)
		for range 10 {
			a, err := askApp(context.Background(), consumer)
			if err != nil || a.Message != "signed-v2" {
				t.Fatalf("with the tag on an unsigned artifact the Pods must keep answering signed-v2: %+v, %v", a, err)
			}
		}
		var ks kustomizev1.Kustomization
		if err := suite.client.Get(context.Background(), client.ObjectKey{Namespace: consumer, Name: "app"}, &ks); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(ks.Status.LastAppliedRevision, forged.Digest) {
			t.Errorf("the consumer's Kustomization applied the unsigned %s", ks.Status.LastAppliedRevision)
		}
	})
}

// waitSignedPush waits until KCLArtifact ns/app published sourceRevision and pushed it signed.
func waitSignedPush(t *testing.T, ns, sourceRevision string) *kclv1.OCIRecord {
	t.Helper()
	var rec *kclv1.OCIRecord
	waitFor(t, fmt.Sprintf("%s/app pushing its artifact of %s, signed", ns, sourceRevision), func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, "app")
		if err != nil {
			return false, "", err
		}
		state := kclState(obj)
		if len(obj.Status.History) == 0 || obj.Status.History[0].SourceRevision != sourceRevision || obj.Status.History[0].OCI == nil {
			return false, state, nil
		}
		rec = obj.Status.History[0].OCI
		return rec.Signed, state, nil
	})
	return rec
}

// waitPush waits until KCLArtifact ns/name pushed its artifact (signed as said) and returns the
// record.
func waitPush(t *testing.T, ns, name string, signed bool) *kclv1.OCIRecord {
	t.Helper()
	var rec *kclv1.OCIRecord
	waitFor(t, fmt.Sprintf("%s/%s pushing its artifact", ns, name), func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, name)
		if err != nil {
			return false, "", err
		}
		if len(obj.Status.History) == 0 || obj.Status.History[0].OCI == nil {
			return false, kclState(obj), nil
		}
		rec = obj.Status.History[0].OCI
		return rec.Signed == signed, kclState(obj), nil
	})
	return rec
}

// followSigned creates in ns the OCIRepository app following signedTag of url, verified with the
// cosign public key of Secret cosign-pub, and the Kustomization app applying it into ns (prune,
// wait), as a spoke cluster's platform repository declares them.
func followSigned(t *testing.T, ns, url string) {
	t.Helper()
	create(t, &sourcev1.OCIRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: sourcev1.OCIRepositorySpec{
			URL: url, Reference: &sourcev1.OCIRepositoryRef{Tag: signedTag}, Insecure: true,
			Verify: &sourcev1.OCIRepositoryVerification{Provider: "cosign",
				SecretRef: &meta.LocalObjectReference{Name: "cosign-pub"}},
			Interval: metav1.Duration{Duration: 3 * time.Second},
			Timeout:  &metav1.Duration{Duration: 30 * time.Second},
		},
	})
	create(t, &kustomizev1.Kustomization{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: kustomizev1.KustomizationSpec{
			SourceRef:       kustomizev1.CrossNamespaceSourceReference{Kind: sourcev1.OCIRepositoryKind, Name: "app"},
			Path:            "./",
			TargetNamespace: ns,
			Prune:           true,
			Wait:            true,
			Interval:        metav1.Duration{Duration: time.Minute},
			RetryInterval:   &metav1.Duration{Duration: 10 * time.Second},
			Timeout:         &metav1.Duration{Duration: 2 * time.Minute},
		},
	})
}

// waitPulled waits until the OCIRepository app of ns verified and stored digest and its
// Kustomization applied it.
func waitPulled(t *testing.T, ns, digest string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s/app verified and applied %s", ns, digest), func(ctx context.Context) (bool, string, error) {
		var or sourcev1.OCIRepository
		if err := suite.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &or); err != nil {
			return false, "", err
		}
		state := "OCIRepository: " + conditionLine(or.Status.Conditions)
		if !conditions.IsTrue(&or, sourcev1.SourceVerifiedCondition) || or.Status.Artifact == nil ||
			!strings.HasSuffix(or.Status.Artifact.Revision, "@"+digest) {
			return false, state, nil
		}
		var ks kustomizev1.Kustomization
		if err := suite.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &ks); err != nil {
			return false, "", err
		}
		state += "; Kustomization: " + ks.Status.LastAppliedRevision + " " + conditionLine(ks.Status.Conditions)
		return conditions.IsReady(&ks) && strings.HasSuffix(ks.Status.LastAppliedRevision, "@"+digest), state, nil
	})
}

// waitRefused waits until the OCIRepository app of ns refused digest (SourceVerified=False naming
// it, Ready=False) and returns the message.
func waitRefused(t *testing.T, ns, digest string) string {
	t.Helper()
	var msg string
	waitFor(t, fmt.Sprintf("%s/app refusing %s", ns, digest), func(ctx context.Context) (bool, string, error) {
		var or sourcev1.OCIRepository
		if err := suite.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &or); err != nil {
			return false, "", err
		}
		c := apimeta.FindStatusCondition(or.Status.Conditions, sourcev1.SourceVerifiedCondition)
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, digest) {
			return false, conditionLine(or.Status.Conditions), nil
		}
		msg = c.Message
		return conditions.IsFalse(&or, meta.ReadyCondition), conditionLine(or.Status.Conditions), nil
	})
	if !strings.Contains(msg, "failed to verify the signature using provider 'cosign'") {
		t.Errorf("SourceVerified=False %q, want a cosign verification failure", msg)
	}
	return msg
}

func conditionLine(cs []metav1.Condition) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(parts, "; ")
}

// pushedBytes is what a push of digest put in the registry's repository ns/app: the artifact's
// manifest, config and layer, and the manifests and blobs of its signature and attestation
// (cosign's sha256-<hex>.sig and .att tags).
func pushedBytes(t *testing.T, reg *nodeRegistry, ns, digest string) int {
	t.Helper()
	repo := reg.host + "/" + ns + "/app"
	tagBase := strings.Replace(digest, ":", "-", 1)
	total := 0
	for _, ref := range []string{repo + "@" + digest, repo + ":" + tagBase + ".sig", repo + ":" + tagBase + ".att"} {
		raw, err := crane.Manifest(ref, crane.Insecure, crane.WithTransport(reg.transport))
		if err != nil {
			t.Fatalf("reading %s: %v", ref, err)
		}
		m, err := v1.ParseManifest(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		total += len(raw) + int(m.Config.Size)
		for _, l := range m.Layers {
			total += int(l.Size)
		}
	}
	return total
}

// pushBesideRender reports, for namespace ns on the controller Pod, each push's duration (its
// "artifact pushed" log lines) beside the mean render time (render_duration_seconds).
func pushBesideRender(t *testing.T, ns string) {
	t.Helper()
	pod, err := controllerPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	text, err := scrapeController(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	match := map[string]string{"namespace": ns}
	n := metricSum(text, "kcl_artifact_controller_render_duration_seconds_count", match)
	if n == 0 {
		t.Fatalf("no render of namespace %s in the controller's metrics", ns)
	}
	renderMean := time.Duration(metricSum(text, "kcl_artifact_controller_render_duration_seconds_sum", match) / n * float64(time.Second))
	// logged, not a figure: figures are in tenths of a second, renders take milliseconds
	logf("node: figure: signed: mean render of %s (%d renders): %s", ns, int(n), renderMean.Round(100*time.Microsecond))
	var pushes []string
	for _, line := range strings.Split(controllerLogs(t), "\n") {
		if strings.Contains(line, `"artifact pushed"`) && strings.Contains(line, `"namespace":"`+ns+`"`) {
			if _, rest, ok := strings.Cut(line, `"duration":"`); ok {
				d, _, _ := strings.Cut(rest, `"`)
				pushes = append(pushes, d)
			}
		}
	}
	if len(pushes) < 2 {
		t.Fatalf("the controller logged %d pushes of namespace %s, want the two artifacts'", len(pushes), ns)
	}
	logf("node: figure: signed: push durations in the controller Pod: %s", strings.Join(pushes, ", "))
}
