package fluxenv

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	imagev1 "github.com/fluxcd/image-reflector-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/google/go-containerregistry/pkg/crane"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestRegistryPushImageTag: each pushed tag is listed by the registry and has its own digest,
// the one the registry serves for it.
func TestRegistryPushImageTag(t *testing.T) {
	r, err := StartRegistry(t.TempDir() + "/registry.log")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx := context.Background()
	digests := map[string]string{}
	for _, tag := range []string{"1.0.0", "1.1.0"} {
		if digests[tag], err = r.PushImageTag(ctx, "team/web", tag); err != nil {
			t.Fatal(err)
		}
		served, err := crane.Digest(r.Image("team/web")+":"+tag, crane.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if served != digests[tag] {
			t.Errorf("tag %s: pushed digest %s, registry serves %s", tag, digests[tag], served)
		}
	}
	if digests["1.0.0"] == digests["1.1.0"] {
		t.Errorf("two tags share the digest %s", digests["1.0.0"])
	}
	tags, err := crane.ListTags(r.Image("team/web"), crane.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(tags, ",") != "1.0.0,1.1.0" {
		t.Errorf("tags %v, want [1.0.0 1.1.0]", tags)
	}
}

// TestStartImageReflectorNotBuilt: asking for image-reflector-controller without its binary
// fails before anything starts, saying how to build it.
func TestStartImageReflectorNotBuilt(t *testing.T) {
	tb, err := LoadTestBin()
	if err != nil {
		t.Fatal(err)
	}
	without := *tb
	without.ImageReflectorController = ""
	env, err := Start(context.Background(), Options{WorkDir: t.TempDir(), TestBin: &without, ImageReflector: true})
	if err == nil {
		_ = env.Stop()
		t.Fatal("Start succeeded without an image-reflector-controller binary")
	}
	for _, want := range []string{"IMAGE_REFLECTOR_CONTROLLER_BIN", "hack/imagereflector.sh"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
}

// TestImageReflectorFollowsPushedTags: the real image-reflector-controller scans the
// environment's registry (127.0.0.1, plain HTTP) and its ImagePolicy selects the newest tag in
// range, with that tag's digest; a tag pushed later is selected once a reconcile is requested,
// without waiting for the ImageRepository's 1m interval.
func TestImageReflectorFollowsPushedTags(t *testing.T) {
	tb, err := LoadTestBin()
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.CheckImageReflector(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	env, err := Start(ctx, Options{WorkDir: t.TempDir(), TestBin: tb, ImageReflector: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(env.LogTails(30))
		}
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	const ns, repo = "images", "team/web"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Registry.PushImageTag(ctx, repo, "1.0.0"); err != nil {
		t.Fatal(err)
	}
	// a pre-release is outside the range: were it selected, it would win over every later tag
	if _, err := env.Registry.PushImageTag(ctx, repo, "2.0.0-rc.1"); err != nil {
		t.Fatal(err)
	}
	ir := &imagev1.ImageRepository{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: imagev1.ImageRepositorySpec{Image: env.Registry.Image(repo), Insecure: true,
			Interval: metav1.Duration{Duration: time.Minute}},
	}
	ip := &imagev1.ImagePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: imagev1.ImagePolicySpec{
			ImageRepositoryRef:     meta.NamespacedObjectReference{Name: ir.Name},
			Policy:                 imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}},
			DigestReflectionPolicy: imagev1.ReflectIfNotPresent,
		},
	}
	start := time.Now()
	for _, obj := range []client.Object{ir, ip} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	waitLatest(ctx, t, env, ip, "1.0.0", "", 2*time.Minute)
	t.Logf("first selection (1.0.0) %s after creating the ImageRepository and ImagePolicy", since(start))

	digest, err := env.Registry.PushImageTag(ctx, repo, "1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	token := requestReconcile(ctx, t, env, ir)
	// well within the 1m interval: the next scheduled scan is about a minute after the first one
	waitLatest(ctx, t, env, ip, "1.1.0", digest, 30*time.Second)
	t.Logf("1.1.0 selected %s after its push and the reconcile request (ImageRepository interval 1m)", since(start))
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ir), ir); err != nil {
		t.Fatal(err)
	}
	if got := ir.Status.LastHandledReconcileAt; got != token {
		t.Errorf("ImageRepository lastHandledReconcileAt %q, want the request %q: the scan was not the one requested", got, token)
	}
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// requestReconcile sets reconcile.fluxcd.io/requestedAt on obj, as `flux reconcile` does, and
// returns its value (the controller echoes it in status.lastHandledReconcileAt).
func requestReconcile(ctx context.Context, t *testing.T, env *Env, obj client.Object) string {
	t.Helper()
	token := time.Now().Format(time.RFC3339Nano)
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	obj.SetAnnotations(map[string]string{meta.ReconcileRequestAnnotation: token})
	if err := env.Client.Patch(ctx, obj, patch); err != nil {
		t.Fatal(err)
	}
	return token
}

// waitLatest waits for the policy's latestRef to name the registry's image at tag (and digest,
// if not empty).
func waitLatest(ctx context.Context, t *testing.T, env *Env, ip *imagev1.ImagePolicy, tag, digest string, timeout time.Duration) {
	t.Helper()
	err := WaitFor(ctx, timeout, "ImagePolicy latestRef "+tag, func(ctx context.Context) (bool, string, error) {
		var got imagev1.ImagePolicy
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ip), &got); err != nil {
			return false, "", err
		}
		ref := got.Status.LatestRef
		state := fmt.Sprintf("latestRef %+v, conditions %s", ref, conditions(got.Status.Conditions))
		if ref == nil || ref.Tag != tag || (digest != "" && ref.Digest != digest) {
			return false, state, nil
		}
		if ref.Name != env.Registry.Image("team/web") {
			return false, state, fmt.Errorf("latestRef names %s, not the registry's image", ref.Name)
		}
		return true, state, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func conditions(cs []metav1.Condition) string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return strings.Join(out, "; ")
}
