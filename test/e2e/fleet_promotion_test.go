package e2e

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact"
)

// heldFor is how long the test watches production's tag and the spoke not move while a newer
// artifact waits for its approval: two of the spoke's OCIRepository intervals (2s), so the spoke
// has pulled the tag at least twice in it.
const heldFor = 5 * time.Second

// TestFleetFollowsAStage: promotion over the pull layout. In the hub, stage dev applies (so
// kustomize-controller's health checks give it the health production's upstream gate reads)
// and pushes every artifact it publishes under tag "dev"; stage production follows dev with an
// approval gate, applies nothing itself, and pushes to the same repository under tag
// "production", which the spoke's own Flux follows, verifying the cosign signature. A commit
// reaches dev's tag at once; production renders it ahead but pushes nothing, its tag and the
// spoke stay where they were, until the approval: then production's tag moves and the spoke
// applies production's rendering.
func TestFleetFollowsAStage(t *testing.T) {
	t.Parallel()
	spoke := fleetSpoke(t)
	ns := newNamespace(t, "fleet-stage")
	repo := ns + "/app"

	rev1 := gitRevision(createRepo(t, ns, stageFiles("1")))
	createGitRepository(t, ns, "app", ns)
	secret, pub := cosignKeySecret(t, ns, "cosign")
	create(t, secret)
	dev := newStage(ns, "dev", "dev", nil)
	dev.Spec.Publish = signedPublish(repo, "dev", "cosign")
	create(t, dev)
	// production renders web-config into ns, the spoke's namespace of the same name
	prod := newStage(ns, "production", "production", nil)
	prod.Spec.Kustomization = &kclv1.KustomizationTemplate{Disabled: true}
	prod.Spec.Promotion = &kclv1.Promotion{From: kclv1.UpstreamReference{Name: "dev"}, Approval: kclv1.ApprovalRequired}
	prod.Spec.Publish = signedPublish(repo, "production", "cosign")
	create(t, prod)
	spokeNamespace(t, spoke, ns, "cosign-pub", pub)

	// the first commit: dev pushes it; production pushes nothing before its approval
	devRec1, _ := waitPushed(t, ns, "dev", rev1)
	expectTag(t, repo, "dev", devRec1.Digest)
	waiting := waitForApproval(t, ns, rev1)
	expectTag(t, repo, "production", "")
	approve(t, ns, "production", waiting.Digest, "alice")
	prodRec1, seen := waitPushed(t, ns, "production", rev1)
	expectTag(t, repo, "production", prodRec1.Digest)
	spokeFollow(t, spoke, ns, "app", repo, "production", "cosign-pub")
	want := map[string]string{"message": "production", "version": "1"}
	waitSpokeConfigMap(t, spoke, ns, "web-config", want)
	logPublishToSpoke(t, "first commit, approved", prodRec1, seen)
	waitConfigMap(t, ns, "web-config", map[string]string{"message": "dev", "version": "1"})

	// a second commit: dev's tag moves to it, production's does not
	rev2 := commit(t, ns, "version 2", stageFiles("2"))
	devRec2, _ := waitPushed(t, ns, "dev", rev2)
	if devRec2.Digest == devRec1.Digest || devRec2.Tag != "dev" {
		t.Errorf("dev pushed the second commit as %s tag %q, want a new digest (the first was %s) under tag dev",
			devRec2.Digest, devRec2.Tag, devRec1.Digest)
	}
	expectTag(t, repo, "dev", devRec2.Digest)
	// dev ran it healthy (the gates before the approval are open): only the approval holds it
	waiting = waitForApproval(t, ns, rev2)
	p := getStage(t, ns, "production")
	if len(p.Status.History) == 0 || p.Status.History[0].OCI == nil || p.Status.History[0].OCI.Digest != prodRec1.Digest {
		t.Errorf("production while %s waits: %s, want history[0] pushed as %s", rev2, stageState(p), prodRec1.Digest)
	}
	// pushing would have tagged the waiting artifact kcl-sha256-<hex>: not in the registry
	digestTag, err := ociartifact.DigestTag(waiting.Digest)
	if err != nil {
		t.Fatal(err)
	}
	expectTag(t, repo, digestTag, "")
	spokeRevision := "@" + prodRec1.Digest
	expectHeld(t, heldFor, fmt.Sprintf("production's tag at %s and the spoke on version 1 while %s waits for approval", prodRec1.Digest, rev2),
		func() string {
			if got := tagDigest(t, repo, "production"); got != prodRec1.Digest {
				return "tag production moved to " + got
			}
			var cm corev1.ConfigMap
			if err := spoke.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "web-config"}, &cm); err != nil || !maps.Equal(cm.Data, want) {
				return fmt.Sprintf("the spoke's ConfigMap web-config: data %v, error %v", cm.Data, err)
			}
			or := &sourcev1.OCIRepository{}
			if err := spoke.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "app"}, or); err != nil ||
				or.Status.Artifact == nil || !strings.HasSuffix(or.Status.Artifact.Revision, spokeRevision) {
				return fmt.Sprintf("the spoke's OCIRepository: %s, error %v", artifactString(or.Status.Artifact), err)
			}
			return ""
		})

	// the approval: production pushes, its tag moves, the spoke applies production's rendering
	approve(t, ns, "production", waiting.Digest, "alice")
	approved := time.Now()
	prodRec2, seen := waitPushed(t, ns, "production", rev2)
	if prodRec2.Digest == prodRec1.Digest || prodRec2.Digest == devRec2.Digest {
		t.Errorf("production pushed the second commit as %s: the first's %s, or dev's %s", prodRec2.Digest, prodRec1.Digest, devRec2.Digest)
	}
	expectTag(t, repo, "production", prodRec2.Digest)
	expectTag(t, repo, digestTag, prodRec2.Digest)
	want["version"] = "2"
	waitSpokeConfigMap(t, spoke, ns, "web-config", want)
	t.Logf("figure: approval -> production's ConfigMap applied in the spoke (OCIRepository interval 2s): %s (push seen after %s)",
		time.Since(approved).Round(10*time.Millisecond), seen.Sub(approved).Round(10*time.Millisecond))
	logPublishToSpoke(t, "second commit, approved", prodRec2, seen)
	waitVerified(t, spoke, ns, "app", metav1.ConditionTrue, prodRec2.Digest)
	if rec := getStage(t, ns, "production").Status.History[0].Promotion; rec == nil || rec.Upstream != "dev" || rec.ApprovedBy != "alice" {
		t.Errorf("production: history[0].promotion %+v, want from dev approved by alice", rec)
	}
	// dev's tag stayed on dev's own artifact
	expectTag(t, repo, "dev", devRec2.Digest)
}

// waitForApproval waits until production's newest waiting artifact is of sourceRevision and
// waits for nothing but its approval (Promoted reason WaitingForApproval: the gates before it
// are open), and returns it.
func waitForApproval(t *testing.T, ns, sourceRevision string) kclv1.WaitingArtifact {
	t.Helper()
	p := waitStage(t, ns, "production", "its artifact of "+sourceRevision+" waiting for approval only", func(o *kclv1.KCLArtifact) bool {
		c := apimeta.FindStatusCondition(o.Status.Conditions, kclv1.PromotedCondition)
		return o.Status.Promotion != nil && len(o.Status.Promotion.Waiting) > 0 &&
			o.Status.Promotion.Waiting[0].SourceRevision == sourceRevision &&
			c != nil && c.Reason == kclv1.WaitingForApprovalReason
	})
	return p.Status.Promotion.Waiting[0]
}

// tagDigest is the manifest digest tag points at in the suite registry's repo, "" when there is
// no such tag.
func tagDigest(t *testing.T, repo, tag string) string {
	t.Helper()
	ref, err := name.NewTag(suite.env.Registry.Image(repo)+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(ref, remote.WithContext(t.Context()))
	var terr *transport.Error
	if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
		return ""
	}
	if err != nil {
		t.Fatalf("HEAD %s: %v", ref, err)
	}
	return desc.Digest.String()
}

// expectTag checks that tag of repo points at digest ("" for no such tag).
func expectTag(t *testing.T, repo, tag, digest string) {
	t.Helper()
	if got := tagDigest(t, repo, tag); got != digest {
		t.Errorf("tag %s of %s: %q, want %q", tag, repo, got, digest)
	}
}

// expectHeld checks check (which returns what is wrong, or "") every 250ms for d and fails at
// the first violation.
func expectHeld(t *testing.T, d time.Duration, what string, check func() string) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		if msg := check(); msg != "" {
			t.Fatalf("%s: %s", what, msg)
		}
		if time.Now().After(end) {
			return
		}
		select {
		case <-t.Context().Done():
			t.Fatalf("%s: %v", what, t.Context().Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
