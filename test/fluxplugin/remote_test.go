package fluxplugin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// diff and ui reach the controller's servers: through a port-forward to its leader Pod (test/node
// runs that on a real node) or, without a Deployment, at the artifact URL (test/e2e). Here, with
// no controller and no node, what each says when it cannot.
func TestDiffAndUIWithoutAController(t *testing.T) {
	fluxBinary(t)
	cfg, kc := startClusterConfig(t)
	ctx := context.Background()
	installCRDs(t, cfg)
	c := newClient(t, cfg)
	for _, ns := range []string{"apps", "kcl-system"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	// 127.0.0.1:1 refuses connections: no artifact server is reachable there
	createRemoteFixture(t, c, "two", "http://127.0.0.1:1/kclartifact/apps/two/latest.tar.gz?token=0a1b", digestB, digestA)
	createRemoteFixture(t, c, "one", "http://127.0.0.1:1/kclartifact/apps/one/latest.tar.gz", digestA)

	r := flux(t, kc, "kcl", "diff", "two", "-n", "apps")
	if r.code != 1 || r.stdout != "" || strings.Count(r.stderr, "\n") != 1 ||
		!strings.HasPrefix(r.stderr, `✗ artifact server not reachable: Get "http://127.0.0.1:1/kclartifact/apps/two/diff?token=0a1b": dial tcp 127.0.0.1:1: connect: connection refused`) {
		t.Errorf("diff without a reachable server: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	oneFailure(t, flux(t, kc, "kcl", "diff", "two", "-n", "apps", "--from", "sha256:00000000"),
		"digest sha256:00000000 not found in the history of KCLArtifact two (flux kcl history two)")
	oneFailure(t, flux(t, kc, "kcl", "diff", "one", "-n", "apps"),
		"KCLArtifact one keeps 1 artifact(s): there is nothing to compare yet")
	oneFailure(t, flux(t, kc, "kcl", "diff", "nope", "-n", "apps"), "KCLArtifact object 'nope' not found in apps namespace")
	oneFailure(t, flux(t, kc, "kcl", "diff", "kustomization", "two", "-n", "apps"), `unknown kind "kustomization": flux kcl diff works on KCLArtifacts: `+
		"flux kcl diff <name>, or flux kcl diff kclartifact <name> --path <dir>")
	oneFailure(t, flux(t, kc, "kcl", "build", "kustomization", "two", "-n", "apps"), `unknown kind "kustomization": flux kcl build works on KCLArtifacts: `+
		"flux kcl build kclartifact <name> --path <dir>")
	oneFailure(t, flux(t, kc, "kcl", "build"), "give a kind: flux kcl build kclartifact <name> --path <dir>")
	oneFailure(t, flux(t, kc, "kcl", "ui", "--port", "0"), "no Deployment with the label app.kubernetes.io/name=kcl-artifact-controller found: "+
		"a controller running outside the cluster serves its browser view itself, at its --ui-addr (default 127.0.0.1:9091)")
	oneFailure(t, flux(t, kc, "kcl", "ui", "nope", "-n", "apps"), "KCLArtifact object 'nope' not found in apps namespace")

	d := controllerDeployment("ghcr.io/kcl-flux/kcl-artifact-controller:v1.0.0")
	d.Spec.Template.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 9090}}
	if err := c.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	// the Deployment's Pod is not Ready: no kubelet runs here, and a standby is never Ready
	r = flux(t, kc, "kcl", "ui", "--port", "0", "--timeout", "5s")
	oneFailure(t, r, "no Ready Pod of Deployment kcl-system/kcl-artifact-controller (app.kubernetes.io/name=kcl-artifact-controller): the controller has no leader yet")
	r = flux(t, kc, "kcl", "diff", "two", "-n", "apps")
	if r.code != 1 || !strings.HasSuffix(r.stderr, "✗ no Ready Pod of Deployment kcl-system/kcl-artifact-controller (app.kubernetes.io/name=kcl-artifact-controller): the controller has no leader yet\n") {
		t.Errorf("diff without a leader: exit %d, stderr %q", r.code, r.stderr)
	}

	d.Spec.Template.Spec.Containers[0].Args = []string{"run", "--ui-addr="}
	if err := c.Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	oneFailure(t, flux(t, kc, "kcl", "ui", "--port", "0"),
		"the browser view is off: Deployment kcl-system/kcl-artifact-controller runs the controller with an empty --ui-addr")
}

// createRemoteFixture creates a KCLArtifact whose history has digests, newest first.
func createRemoteFixture(t *testing.T, c client.Client, name, url string, digests ...string) {
	t.Helper()
	ctx := context.Background()
	obj := &kclv1.KCLArtifact{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps"},
		Spec: kclv1.KCLArtifactSpec{SourceRef: kclv1.SourceReference{Kind: "GitRepository", Name: name},
			Interval: metav1.Duration{Duration: time.Minute}},
	}
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	obj.Status.Artifact = &meta.Artifact{Path: "p.tar.gz", URL: url, Revision: "latest@" + digests[0], Digest: digests[0], LastUpdateTime: now}
	for _, d := range digests {
		obj.Status.History = append(obj.Status.History, kclv1.ArtifactHistoryEntry{Digest: d, Revision: "latest@" + d, URL: url, LastPublished: now})
	}
	if err := c.Status().Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
}
