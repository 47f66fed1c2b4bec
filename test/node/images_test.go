package node

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	imagev1 "github.com/fluxcd/image-reflector-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
	"github.com/kcl-flux/kcl-artifact-controller/test/kubenode"
)

const (
	// scanInterval is the ImageRepository's own interval: every push below asks for a scan at
	// once (reconcile.fluxcd.io/requestedAt), so no figure waits for it.
	scanInterval = time.Minute
	// demoRepo is the demo application's repository in the test's registry.
	demoRepo = "kcl-flux/demo-app"
	// imagesMessage is what the demo application answers (kcl.yaml's message).
	imagesMessage = "images"
	imageIRC      = "ghcr.io/fluxcd/image-reflector-controller:v1.2.4"
)

// TestImageTags: image automation without a Git write, on the node. image-reflector-controller
// runs as a Pod of flux-system (installed with Flux, from its own release manifests); the demo
// application's image is pushed to a registry on the node's address, which it scans and from
// which the node's containerd pulls (plain HTTP, hosts.toml). The program takes its image from
// option("web.image"), its KCLArtifact reads the ImagePolicy web (semver >=1.0.0) with
// argumentsFrom and has spec.remediation {retries: 1}; the Git repository has one commit. Tags
// pushed in order: 1.0.0 and 1.1.0 reach running Pods; 1.2.0, whose entrypoint does not exist,
// fails its health checks, is rolled back to 1.1.0 and quarantined, and is not rendered or
// applied again while the policy selects it; 1.3.0 rolls forward.
func TestImageTags(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "images")
	ircRunsAsPod(t)
	reg := startNodeRegistry(t)
	app := demoAppImage(t)
	figure("image tags: image-reflector-controller scan interval (not waited: a scan is asked at each push)", scanInterval)

	sha := createImageRepo(t, ns, "images")
	ir := &imagev1.ImageRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: imagev1.ImageRepositorySpec{Image: reg.image(), Insecure: true, Interval: metav1.Duration{Duration: scanInterval}}}
	create(t, ir)
	create(t, &imagev1.ImagePolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: imagev1.ImagePolicySpec{
			ImageRepositoryRef:     meta.NamespacedObjectReference{Name: ir.Name},
			Policy:                 imagev1.ImagePolicyChoice{SemVer: &imagev1.SemVerPolicy{Range: ">=1.0.0"}},
			DigestReflectionPolicy: imagev1.ReflectIfNotPresent,
		}})
	artifact := rollbackArtifact(ns, "images", "./", 1, 30*time.Second)
	artifact.Spec.ArgumentsFrom = []kclv1.ArgumentsReference{{Kind: "ImagePolicy", Name: "web"}}
	create(t, artifact)
	waitFor(t, "the KCLArtifact waiting for the policy's first selection", func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, "app")
		if err != nil {
			return false, "", err
		}
		return conditions.GetReason(obj, meta.ReadyCondition) == kclv1.InputNotReadyReason && obj.Status.Artifact == nil &&
			strings.Contains(readyMessage(obj), "web"), kclState(obj), nil
	})
	pod, err := controllerPod(ctx)
	if err != nil {
		t.Fatal(err)
	}

	tags := &tagRun{ns: ns, reg: reg, ir: ir, sourceRevision: gitRevision(sha)}
	var good kclv1.ArtifactHistoryEntry
	for _, tag := range []string{"1.0.0", "1.1.0"} {
		if !t.Run(tag+" reaches running Pods", func(t *testing.T) {
			good = tags.rollForward(t, app, tag)
		}) {
			return
		}
	}

	var bad kclv1.ArtifactHistoryEntry
	if !t.Run("1.2.0 cannot start: rolled back to 1.1.0 and quarantined", func(t *testing.T) {
		bad = tags.rollBack(t, unstartableImage(t, app), good)
	}) {
		return
	}

	t.Run("1.2.0 is not retried while the policy selects it", func(t *testing.T) {
		// a scan re-evaluates the policy, which still selects 1.2.0: nothing may follow from it
		tags.requestScan(t)
		before := rendersIn(t, pod, ns)
		for i := range 3 {
			neverApplied(t, ns, good, bad, rollbackInterval)
			if n := rendersIn(t, pod, ns) - before; n != 0 {
				t.Errorf("interval %d: %d renders while the policy still selects the quarantined 1.2.0", i+1, n)
			}
		}
		if ref := tags.latest(t); ref.Tag != "1.2.0" {
			t.Errorf("the policy selects %s, not 1.2.0: the window proved nothing", ref.Tag)
		}
		figureCount("image tags: renders over 3 intervals with 1.2.0 quarantined", rendersIn(t, pod, ns)-before)
	})

	t.Run("1.3.0 rolls forward", func(t *testing.T) {
		tags.rollForward(t, app, "1.3.0")
		obj, err := getKCLArtifact(ctx, ns, "app")
		if err != nil {
			t.Fatal(err)
		}
		if c := conditions.Get(obj, kclv1.RemediatedCondition); c != nil {
			t.Errorf("Remediated stays after rolling forward: %+v", c)
		}
		if rem := obj.Status.Remediation; rem != nil && rem.Quarantined != nil {
			t.Errorf("the quarantine stays after rolling forward: %+v", rem.Quarantined)
		}
	})
}

// ircRunsAsPod checks that image-reflector-controller is a Pod of flux-system, from Flux's
// install, with the image built from its binary.
func ircRunsAsPod(t *testing.T) {
	t.Helper()
	var dep appsv1.Deployment
	key := client.ObjectKey{Namespace: "flux-system", Name: "image-reflector-controller"}
	if err := suite.client.Get(context.Background(), key, &dep); err != nil {
		t.Fatalf("image-reflector-controller is not installed with Flux: %v", err)
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != imageIRC || dep.Status.AvailableReplicas != 1 {
		t.Fatalf("image-reflector-controller runs %s with %d available replicas, want %s and 1", img, dep.Status.AvailableReplicas, imageIRC)
	}
}

// nodeRegistry is an OCI registry (go-containerregistry's, in memory) served by the test on the
// node's address: image-reflector-controller's Pod and the node's containerd reach it there.
type nodeRegistry struct {
	host      string // 10.200.0.1:<port>
	transport http.RoundTripper
}

func startNodeRegistry(t *testing.T) *nodeRegistry {
	t.Helper()
	ln, err := suite.node.Listen("tcp", kubenode.NodeIP+":0")
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(suite.node.LogDir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(logFile, "registry: ", log.LstdFlags))),
		ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() {
		srv.Close()
		logFile.Close()
	})
	r := &nodeRegistry{host: ln.Addr().String(), transport: suite.node.HTTPClient(0).Transport}
	if err := suite.node.PullOverHTTP(r.host); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *nodeRegistry) image() string { return r.host + "/" + demoRepo }

// push pushes img as tag and returns its manifest digest.
func (r *nodeRegistry) push(t *testing.T, img v1.Image, tag string) string {
	t.Helper()
	ref := r.image() + ":" + tag
	if err := crane.Push(img, ref, crane.Insecure, crane.WithTransport(r.transport)); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// demoAppImage is the demo application's image as `make image` wrote it (bin/images).
func demoAppImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := tarball.ImageFromPath(filepath.Join(suite.repo, "bin", "images", "demo-app.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// tagged is img labelled with its version, so that each tag has a digest of its own.
func tagged(t *testing.T, img v1.Image, tag string) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := *cf.Config.DeepCopy()
	c.Labels = map[string]string{"org.opencontainers.image.version": tag}
	out, err := mutate.Config(img, c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// unstartableImage is img with an entrypoint that does not exist: its container never starts.
func unstartableImage(t *testing.T, img v1.Image) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := *cf.Config.DeepCopy()
	c.Entrypoint = []string{"/usr/local/bin/demo-app-removed"}
	out, err := mutate.Config(img, c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// createImageRepo makes a Git repository of fixtures/node-app whose program takes its image from
// option("web.image") and lets the kubelet pull it, in one commit, and its GitRepository.
func createImageRepo(t *testing.T, ns, name string) string {
	t.Helper()
	dir := t.TempDir()
	fixture := filepath.Join(suite.repo, "fixtures", "node-app")
	for _, f := range []string{"kcl.mod", "main.k"} {
		data, err := os.ReadFile(filepath.Join(fixture, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "main.k" {
			data = []byte(imageProgram(t, string(data)))
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	settings := settingsFile(map[string]any{"message": imagesMessage})
	if err := os.WriteFile(filepath.Join(dir, "kcl.yaml"), []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	sha, err := suite.git.CreateRepo(name, dir)
	if err != nil {
		t.Fatal(err)
	}
	create(t, &sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: sourcev1.GitRepositorySpec{URL: suite.git.URL(name), Interval: metav1.Duration{Duration: 5 * time.Second},
			Reference: &sourcev1.GitRepositoryRef{Branch: fluxenv.DefaultBranch}}})
	return sha
}

// imageProgram is the demo program with its image from the ImagePolicy's argument, pulled.
func imageProgram(t *testing.T, program string) string {
	t.Helper()
	for old, repl := range map[string]string{
		`option("image", type="str", default="ghcr.io/kcl-flux/demo-app:v1")`: `option("web.image", type="str", required=True)`,
		`imagePullPolicy = "Never"`: `imagePullPolicy = "IfNotPresent"`,
	} {
		if !strings.Contains(program, old) {
			t.Fatalf("fixtures/node-app/main.k no longer has %s", old)
		}
		program = strings.ReplaceAll(program, old, repl)
	}
	return program
}

// figurePoll is how often the waits whose durations are figures ask: each figure is that
// precise.
const figurePoll = 100 * time.Millisecond

// waitFigure is waitFor asking every figurePoll.
func waitFigure(t *testing.T, what string, cond func(ctx context.Context) (bool, string, error)) time.Duration {
	t.Helper()
	began := time.Now()
	if err := pollEvery(context.Background(), waitTimeout, figurePoll, what, cond); err != nil {
		t.Fatal(err)
	}
	return time.Since(began)
}

// tagRun pushes tags and follows each through the policy, the KCLArtifact and the Pods.
type tagRun struct {
	ns             string
	reg            *nodeRegistry
	ir             *imagev1.ImageRepository
	sourceRevision string
}

// rollForward pushes tag and waits until it is selected, published and running in every Pod,
// answering; it reports the three stages and returns the artifact's history entry.
func (r *tagRun) rollForward(t *testing.T, app v1.Image, tag string) kclv1.ArtifactHistoryEntry {
	t.Helper()
	pushed := time.Now()
	image, digest := r.pushAndSelect(t, tagged(t, app, tag), tag)
	began := time.Now()
	entry := r.waitEntry(t, tag, func(obj *kclv1.KCLArtifact, e kclv1.ArtifactHistoryEntry) bool {
		return obj.Status.Artifact != nil && obj.Status.Artifact.Digest == e.Digest
	})
	figure("image tags: "+tag+" selected to artifact published", time.Since(began))
	if input(entry, "web.digest") != digest || input(entry, "web.image") != image {
		t.Errorf("the artifact's inputs are %+v, want web.image %s", entry.Inputs, image)
	}
	began = time.Now()
	waitPodsOn(t, r.ns, image, digest)
	waitAnswers(t, r.ns, imagesMessage, "")
	figure("image tags: "+tag+" published to Pods running, answering", time.Since(began))
	figure("image tags: "+tag+" push to Pods running, answering", time.Since(pushed))
	return waitEntryHealth(t, r, tag, kclv1.HealthHealthy)
}

// rollBack pushes 1.2.0, which cannot start, and waits until it failed, was rolled back to good
// and quarantined, and the Pods run good's image again; it returns the failed entry.
func (r *tagRun) rollBack(t *testing.T, img v1.Image, good kclv1.ArtifactHistoryEntry) kclv1.ArtifactHistoryEntry {
	t.Helper()
	const tag = "1.2.0"
	r.pushAndSelect(t, img, tag)
	began := time.Now()
	bad := waitEntryHealth(t, r, tag, kclv1.HealthFailed)
	figure("image tags: 1.2.0 selected to health check failed (Kustomization timeout 30s)", time.Since(began))
	var obj *kclv1.KCLArtifact
	waitFigure(t, "rolled back to 1.1.0", func(ctx context.Context) (bool, string, error) {
		var err error
		if obj, err = getKCLArtifact(ctx, r.ns, "app"); err != nil {
			return false, "", err
		}
		c := conditions.Get(obj, kclv1.RemediatedCondition)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == kclv1.RolledBackReason &&
			digestOf(obj) == good.Digest, kclState(obj), nil
	})
	goodImage := input(good, "web.image")
	waitPodsOn(t, r.ns, goodImage, input(good, "web.digest"))
	waitAnswers(t, r.ns, imagesMessage, "")
	figure("image tags: 1.2.0 selected to rolled back, Pods on 1.1.0 (retries: 1)", time.Since(began))
	r.remediations(t, map[string]float64{"retry": 1, "rollback": 1})
	q := quarantineOf(t, obj)
	if q.Digest != bad.Digest || q.RolledBackTo != good.Digest || q.Failure.Reason == "" {
		t.Errorf("status.remediation.quarantined is %+v, want %s rolled back to %s, with its failure", q, bad.Digest, good.Digest)
	}
	return bad
}

// pushAndSelect pushes img as tag, asks for a scan at once, and waits until the policy selects
// it; it returns the image reference the program is given and the digest.
func (r *tagRun) pushAndSelect(t *testing.T, img v1.Image, tag string) (string, string) {
	t.Helper()
	digest := r.reg.push(t, img, tag)
	began := time.Now()
	r.requestScan(t)
	waitFigure(t, "the ImagePolicy selecting "+tag, func(ctx context.Context) (bool, string, error) {
		var p imagev1.ImagePolicy
		if err := suite.client.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: "web"}, &p); err != nil {
			return false, "", err
		}
		ref := p.Status.LatestRef
		return ref != nil && ref.Tag == tag && ref.Digest == digest, fmt.Sprintf("latestRef %+v", ref), nil
	})
	figure("image tags: "+tag+" push to policy selected", time.Since(began))
	return r.reg.image() + ":" + tag + "@" + digest, digest
}

// requestScan asks image-reflector-controller to scan the ImageRepository now, as `flux
// reconcile image repository` does.
func (r *tagRun) requestScan(t *testing.T) {
	t.Helper()
	token := time.Now().Format(time.RFC3339Nano)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, meta.ReconcileRequestAnnotation, token)
	if err := suite.client.Patch(context.Background(), r.ir, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	waitFigure(t, "the scan "+token+" handled", func(ctx context.Context) (bool, string, error) {
		if err := suite.client.Get(ctx, client.ObjectKeyFromObject(r.ir), r.ir); err != nil {
			return false, "", err
		}
		return r.ir.Status.LastHandledReconcileAt == token, "last handled " + r.ir.Status.LastHandledReconcileAt, nil
	})
}

// remediations checks kcl_artifact_controller_remediations_total of the namespace, by action.
func (r *tagRun) remediations(t *testing.T, want map[string]float64) {
	t.Helper()
	pod, err := controllerPod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	text, err := scrapeController(context.Background(), pod)
	if err != nil {
		t.Fatal(err)
	}
	for action, n := range want {
		got := metricSum(text, "kcl_artifact_controller_remediations_total", map[string]string{"namespace": r.ns, "action": action})
		if got != n {
			t.Errorf("kcl_artifact_controller_remediations_total{action=%q} is %v, want %v", action, got, n)
		}
	}
}

func (r *tagRun) latest(t *testing.T) *imagev1.ImageRef {
	t.Helper()
	var p imagev1.ImagePolicy
	if err := suite.client.Get(context.Background(), client.ObjectKey{Namespace: r.ns, Name: "web"}, &p); err != nil {
		t.Fatal(err)
	}
	if p.Status.LatestRef == nil {
		return &imagev1.ImageRef{}
	}
	return p.Status.LatestRef
}

// waitEntry waits for the history entry rendered with web.tag = tag for which ok holds.
func (r *tagRun) waitEntry(t *testing.T, tag string, ok func(*kclv1.KCLArtifact, kclv1.ArtifactHistoryEntry) bool) kclv1.ArtifactHistoryEntry {
	t.Helper()
	var entry kclv1.ArtifactHistoryEntry
	waitFigure(t, "the artifact of "+tag, func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, r.ns, "app")
		if err != nil {
			return false, "", err
		}
		for _, e := range obj.Status.History {
			if input(e, "web.tag") == tag && ok(obj, e) {
				if e.SourceRevision != r.sourceRevision {
					return false, "", fmt.Errorf("the artifact of %s is from %s, not the one commit %s", tag, e.SourceRevision, r.sourceRevision)
				}
				entry = e
				return true, "", nil
			}
		}
		return false, kclState(obj) + " history " + historyOf(obj), nil
	})
	return entry
}

func waitEntryHealth(t *testing.T, r *tagRun, tag, health string) kclv1.ArtifactHistoryEntry {
	t.Helper()
	return r.waitEntry(t, tag, func(_ *kclv1.KCLArtifact, e kclv1.ArtifactHistoryEntry) bool { return e.Health == health })
}

// input is the value of the argument name among the entry's inputs.
func input(e kclv1.ArtifactHistoryEntry, name string) string {
	for _, in := range e.Inputs {
		if in.Name == name {
			return in.Value
		}
	}
	return ""
}

// waitPodsOn waits until demo-app's Deployment is rolled out with image and every Pod of the
// namespace is Ready, runs image, and was pulled from the registry with digest (the CRI's
// imageID).
func waitPodsOn(t *testing.T, ns, image, digest string) {
	t.Helper()
	waitFor(t, "every Pod running "+image, func(ctx context.Context) (bool, string, error) {
		var dep appsv1.Deployment
		if err := suite.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "demo-app"}, &dep); err != nil {
			return false, "", err
		}
		want, s := *dep.Spec.Replicas, dep.Status
		if dep.Spec.Template.Spec.Containers[0].Image != image || s.ObservedGeneration != dep.Generation ||
			s.UpdatedReplicas != want || s.AvailableReplicas != want || s.Replicas != want {
			return false, fmt.Sprintf("Deployment %s: %+v", dep.Spec.Template.Spec.Containers[0].Image, s), nil
		}
		var pods corev1.PodList
		if err := suite.client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			st := p.Status.ContainerStatuses
			if p.Spec.Containers[0].Image != image || !podReady(p) || len(st) == 0 || !strings.HasSuffix(st[0].ImageID, "/"+demoRepo+"@"+digest) {
				return false, "Pod " + podImage(p), nil
			}
		}
		return len(pods.Items) == int(want), fmt.Sprintf("%d Pods", len(pods.Items)), nil
	})
}

func podImage(p *corev1.Pod) string {
	id := ""
	if st := p.Status.ContainerStatuses; len(st) > 0 {
		id = st[0].ImageID
	}
	return fmt.Sprintf("%s=%s (imageID %s, ready %t)", p.Name, p.Spec.Containers[0].Image, id, podReady(p))
}
