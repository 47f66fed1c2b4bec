package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// TestPinAndDiff: two commits render two artifacts; the diff URL shows what changed; pinning the
// first makes kustomize-controller apply its objects again, and removing the pin applies the
// second's.
func TestPinAndDiff(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "pin")
	rev1 := gitRevision(createRepo(t, ns, program{version: "1"}.files()))
	createGitRepository(t, ns, "app", ns)
	create(t, newKCLArtifact(ns, "app", "app", nil))
	v1 := waitKCLArtifactReady(t, ns, "app", rev1).Status.Artifact
	waitKustomizationApplied(t, ns, "app", v1.Revision)

	rev2 := commit(t, ns, "version 2", program{version: "2"}.files())
	v2 := waitKCLArtifactReady(t, ns, "app", rev2).Status.Artifact
	waitKustomizationApplied(t, ns, "app", v2.Revision)
	waitConfigMap(t, ns, "app-config", map[string]string{"env": "dev", "greeting": "hello", "version": "2"})

	url := serverURL(ns, "app", "diff")
	code, body, err := httpGet(t, url)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v %s", url, code, err, body)
	}
	expectContainsAll(t, "GET "+url, string(body), v1.Revision+" ("+rev1+") -> "+v2.Revision+" ("+rev2+")",
		"# 0 added, 0 removed, 1 changed, 0 unchanged", "--- a/ConfigMap/"+ns+"/app-config", "-  version: \"1\"", "+  version: \"2\"")

	patchKCLArtifact(t, ns, "app", `{"spec":{"pinnedDigest":"`+v1.Digest+`"}}`)
	waitFor(t, ns, "KCLArtifact "+ns+"/app pinned to "+v1.Revision, func(ctx context.Context) (bool, string, error) {
		obj := &kclv1.KCLArtifact{}
		if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, obj); err != nil {
			return false, "", err
		}
		c := apimeta.FindStatusCondition(obj.Status.Conditions, meta.ReadyCondition)
		ok := c != nil && c.Reason == kclv1.PinnedReason && strings.Contains(c.Message, rev1) &&
			obj.Status.Artifact != nil && obj.Status.Artifact.Digest == v1.Digest
		return ok, kclArtifactState(obj), nil
	})
	ks := waitKustomizationApplied(t, ns, "app", v1.Revision)
	if ks.Status.LastAppliedOriginRevision != rev1 {
		t.Errorf("the pinned artifact was applied with origin revision %q, want %q", ks.Status.LastAppliedOriginRevision, rev1)
	}
	waitConfigMap(t, ns, "app-config", map[string]string{"env": "dev", "greeting": "hello", "version": "1"})

	patchKCLArtifact(t, ns, "app", `{"spec":{"pinnedDigest":null}}`)
	waitKustomizationApplied(t, ns, "app", v2.Revision)
	waitConfigMap(t, ns, "app-config", map[string]string{"env": "dev", "greeting": "hello", "version": "2"})
}
