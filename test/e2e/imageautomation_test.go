package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	imagev1 "github.com/fluxcd/image-reflector-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// webProgram deploys the image an ImagePolicy selected.
const webProgram = `_ns = option("namespace", type="str", required=True)
_labels = {app = "web"}
[{
    apiVersion = "apps/v1"
    kind = "Deployment"
    metadata = {name = "web", namespace = _ns}
    spec = {
        replicas = 1
        selector = {matchLabels = _labels}
        template = {metadata = {labels = _labels}, spec = {containers = [{name = "web", image = option("web.image")}]}}
    }
}]
`

// TestImageTagReachesTheDeploymentWithoutACommit: the real image-reflector-controller scans the
// registry on 127.0.0.1, its ImagePolicy selects the newest tag, and the KCLArtifact renders it
// into the Deployment kustomize-controller applies. Git sees one commit, the first.
func TestImageTagReachesTheDeploymentWithoutACommit(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t, "images")
	reg := suite.env.Registry
	repo := ns + "/web"
	push := func(tag string) {
		if _, err := reg.PushImageTag(t.Context(), repo, tag); err != nil {
			t.Fatal(err)
		}
	}
	push("1.0.0")
	for _, name := range []string{"web", "other"} {
		create(t, &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: imagev1.ImageRepositorySpec{Image: reg.Image(ns + "/" + name), Interval: metav1.Duration{Duration: time.Hour}, Insecure: true}})
		create(t, &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: imagev1.ImagePolicySpec{ImageRepositoryRef: meta.NamespacedObjectReference{Name: name},
				Policy: imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}}}})
	}
	createRepo(t, ns, map[string]string{"main.k": webProgram})
	createGitRepository(t, ns, "app", ns)
	obj := newKCLArtifact(ns, "app", "app", nil)
	obj.Spec.Interval = metav1.Duration{Duration: time.Hour} // only a change of an input renders
	obj.Spec.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "ImagePolicy", Name: "web"}}
	create(t, obj)
	image := reg.Image(repo)
	waitDeploymentImage(t, ns, image+":1.0.0")

	// a new tag: pushed, scanned (asked for now rather than at the scan interval), rendered, applied
	push("1.1.0")
	pushed := time.Now()
	annotateImageRepository(t, ns, "web")
	selected := waitPolicyTag(t, ns, "web", "1.1.0")
	published := waitKCLArtifact(t, ns, "the artifact of 1.1.0", func(o *kclv1.KCLArtifact) bool {
		return len(o.Status.History) > 0 && inputValue(o.Status.History[0], "web.tag") == "1.1.0"
	})
	publishedAt := time.Now()
	waitDeploymentImage(t, ns, image+":1.1.0")
	t.Logf("tag pushed -> policy selected it %s (scan asked for at once) -> artifact published %s -> Deployment applied %s",
		selected.Sub(pushed).Round(time.Millisecond), publishedAt.Sub(selected).Round(time.Millisecond),
		time.Since(publishedAt).Round(time.Millisecond))
	if got := inputValue(published.Status.History[1], "web.tag"); got != "1.0.0" {
		t.Errorf("the previous entry's inputs: web.tag %q, want 1.0.0", got)
	}

	// an unrelated policy's new tag renders nothing
	before := rendersOf(t, ns)
	if _, err := reg.PushImageTag(t.Context(), ns+"/other", "2.0.0"); err != nil {
		t.Fatal(err)
	}
	annotateImageRepository(t, ns, "other")
	waitPolicyTag(t, ns, "other", "2.0.0")
	// a reconcile asked for after it: once handled, the other policy's event was seen before it
	token := annotateReconcile(t, &kclv1.KCLArtifact{}, ns, "app")
	waitKCLArtifact(t, ns, "the reconcile asked for", func(o *kclv1.KCLArtifact) bool { return o.Status.LastHandledReconcileAt == token })
	if n := rendersOf(t, ns) - before; n != 0 {
		t.Errorf("an unrelated ImagePolicy's change caused %d renders, want 0", n)
	}
}

func inputValue(e kclv1.ArtifactHistoryEntry, name string) string {
	for _, in := range e.Inputs {
		if in.Name == name {
			return in.Value
		}
	}
	return ""
}

func annotateImageRepository(t *testing.T, ns, name string) {
	t.Helper()
	annotateReconcile(t, &imagev1.ImageRepository{}, ns, name)
}

// waitPolicyTag waits until the ImagePolicy selected tag, and returns when it was seen.
func waitPolicyTag(t *testing.T, ns, name, tag string) time.Time {
	t.Helper()
	p := &imagev1.ImagePolicy{}
	waitFor(t, ns, "ImagePolicy "+name+" to select "+tag, func(ctx context.Context) (bool, string, error) {
		if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			return false, "", err
		}
		ready := apimeta.FindStatusCondition(p.Status.Conditions, meta.ReadyCondition)
		state := conditionString(ready)
		if p.Status.LatestRef != nil {
			state = p.Status.LatestRef.Tag + "; " + state
		}
		return p.Status.LatestRef != nil && p.Status.LatestRef.Tag == tag, state, nil
	})
	return time.Now()
}

func waitDeploymentImage(t *testing.T, ns, image string) {
	t.Helper()
	d := &appsv1.Deployment{}
	waitFor(t, ns, "Deployment web to run "+image, func(ctx context.Context) (bool, string, error) {
		if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, d); err != nil {
			return false, "", err
		}
		var images []string
		for _, c := range d.Spec.Template.Spec.Containers {
			images = append(images, c.Image)
		}
		return len(images) == 1 && images[0] == image, strings.Join(images, ","), nil
	})
}
