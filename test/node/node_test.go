package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// controllerPod returns the running, Ready controller Pod.
func controllerPod(ctx context.Context) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := suite.client.List(ctx, &pods, client.InNamespace(controllerNS),
		client.MatchingLabels{"app.kubernetes.io/name": "kcl-artifact-controller"}); err != nil {
		return nil, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && podReady(p) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no Ready controller Pod among %d", len(pods.Items))
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// TestControllerPodIsConfined: the controller runs as config/default says (user 65532, read-only
// root, RuntimeDefault seccomp), its engine reports the sandbox on inside the container, and a
// tenant's program can read neither the Pod's service-account token nor the controller's
// environment.
func TestControllerPodIsConfined(t *testing.T) {
	ctx := context.Background()
	pod, err := controllerPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	logs := controllerLogs(t)
	var ready string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "KCL engine ready") {
			ready = line
		}
	}
	if !strings.Contains(ready, `"sandbox":"on"`) || !strings.Contains(ready, "landlock ABI") ||
		!strings.Contains(ready, "seccomp") {
		t.Fatalf("the engine does not report the sandbox on inside the container: %q", ready)
	}
	t.Logf("controller Pod %s: %s", pod.Name, ready)
	status := containerProcessStatus(t, pod, "kcl-artifact-controller")
	for _, want := range []string{"Seccomp:\t2", "NoNewPrivs:\t1", "Uid:\t65532"} {
		if !strings.Contains(status, want) {
			t.Errorf("the controller's process status lacks %q:\n%s", want, status)
		}
	}

	ns := newNamespace(t, "hostile")
	programs := map[string]string{
		"token/main.k":   readProgram(ns, "/var/run/secrets/kubernetes.io/serviceaccount/token"),
		"environ/main.k": readProgram(ns, "/proc/1/environ"),
		"self/main.k":    readProgram(ns, "/proc/self/environ"),
	}
	createRepo(t, ns, "hostile", "node-app", programs)
	for path := range programs {
		name := strings.TrimSuffix(path, "/main.k")
		create(t, kclArtifact(ns, name, "hostile", func(o *kclv1.KCLArtifact) { o.Spec.Path = name }))
	}
	for path := range programs {
		name := strings.TrimSuffix(path, "/main.k")
		waitFor(t, name+" refused", func(ctx context.Context) (bool, string, error) {
			obj, err := getKCLArtifact(ctx, ns, name)
			if err != nil {
				return false, "", client.IgnoreNotFound(err)
			}
			return conditions.GetReason(obj, meta.ReadyCondition) == kclv1.RenderFailedReason &&
				strings.Contains(conditions.GetMessage(obj, meta.ReadyCondition), "Permission denied"), kclState(obj), nil
		})
	}
	var eas sourcev1.ExternalArtifactList
	if err := suite.client.List(ctx, &eas, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(eas.Items) != 0 {
		t.Errorf("a refused program published %d artifacts", len(eas.Items))
	}
	if leaked := strings.Count(controllerLogs(t), "eyJ"); leaked > 0 {
		t.Errorf("the controller's log holds %d JWT-looking strings", leaked)
	}
}

// readProgram publishes the content of a file as a ConfigMap.
func readProgram(ns, path string) string {
	return fmt.Sprintf(`import file
[{apiVersion = "v1", kind = "ConfigMap", metadata = {name = "leak", namespace = %q}, data.v = file.read(%q)}]
`, ns, path)
}

// containerProcessStatus is /proc/<pid>/status of the process of pod whose command is `cmd run`.
// It is found by the Pod's cgroup (pod<UID>), not by name alone: another kcl-artifact-controller
// may run on this machine outside the node (`make demo`, the e2e suite).
func containerProcessStatus(t *testing.T, pod *corev1.Pod, cmd string) string {
	t.Helper()
	podCgroup := "/pod" + string(pod.UID) + "/"
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		args := strings.Split(string(cmdline), "\x00")
		if len(args) < 2 || !strings.HasSuffix(args[0], "/"+cmd) || args[1] != "run" {
			continue
		}
		if cgroups, _ := os.ReadFile("/proc/" + e.Name() + "/cgroup"); !strings.Contains(string(cgroups), podCgroup) {
			continue
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err == nil {
			return string(status)
		}
	}
	t.Fatalf("no process of %s found in the cgroup of Pod %s", cmd, pod.Name)
	return ""
}

// TestGitToRunningPods follows one application through its life on the node: a commit becomes
// Pods answering with its value, a new value reaches new Pods, an image that cannot start fails
// the health check while the old Pods keep answering, the fix recovers, and deleting the
// controller's Pod (and its storage) leaves the workload untouched while every artifact is
// served again.
func TestGitToRunningPods(t *testing.T) {
	ns := newNamespace(t, "app")
	sha := createRepo(t, ns, "app", "node-app", map[string]string{"kcl.yaml": settingsFile(map[string]any{"message": "v1"})})
	began := time.Now()
	create(t, appArtifact(ns, "app"))
	waitApplied(t, ns, "app", gitRevision(sha))
	waitAnswers(t, ns, "v1", "")
	figure("KCLArtifact created to Pods answering", time.Since(began))

	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"a new value reaches new Pods", func(t *testing.T) { newValue(t, ns) }},
		{"flux kcl diff and ui reach the leader Pod", func(t *testing.T) { fluxKCLThroughThePod(t, ns) }},
		{"an image that cannot start fails the health check", func(t *testing.T) { brokenImage(t, ns) }},
		{"the controller Pod is deleted", func(t *testing.T) { controllerPodDeleted(t, ns) }},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			return
		}
	}
}

func newValue(t *testing.T, ns string) {
	began := time.Now()
	sha := commit(t, "app", "message v2", map[string]string{"kcl.yaml": settingsFile(map[string]any{"message": "v2"})})
	waitApplied(t, ns, "app", gitRevision(sha))
	waitAnswers(t, ns, "v2", "")
	figure("commit to new Pods answering", time.Since(began))
}

func brokenImage(t *testing.T, ns string) {
	sha := commit(t, "app", "an image that is not there", map[string]string{"kcl.yaml": settingsFile(
		map[string]any{"message": "v3", "image": "ghcr.io/kcl-flux/demo-app:missing"})})
	waitFor(t, "KustomizationReady=False for the broken image", func(ctx context.Context) (bool, string, error) {
		obj, err := getKCLArtifact(ctx, ns, "app")
		if err != nil {
			return false, "", err
		}
		c := conditions.Get(obj, kclv1.KustomizationReadyCondition)
		return obj.Status.SourceRevision == gitRevision(sha) && c != nil && c.Status == metav1.ConditionFalse &&
			strings.Contains(c.Message, "demo-app"), kclState(obj), nil
	})
	for range 10 {
		a, err := askApp(context.Background(), ns)
		if err != nil || a.Message != "v2" {
			t.Fatalf("while the new revision fails, the old Pods must answer v2: %+v, %v", a, err)
		}
	}
	began := time.Now()
	sha = commit(t, "app", "fix the image", map[string]string{"kcl.yaml": settingsFile(map[string]any{"message": "v4"})})
	waitApplied(t, ns, "app", gitRevision(sha))
	waitAnswers(t, ns, "v4", "")
	figure("fixing commit to Pods answering", time.Since(began))
}

func controllerPodDeleted(t *testing.T, ns string) {
	ctx := context.Background()
	pod, err := controllerPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// the fix's rollout is over first: the Pod of the image that could not start goes once the new
	// ones are available, whatever the controller does
	waitFor(t, "the application's rollout settled", func(ctx context.Context) (bool, string, error) {
		unsettled := podsIn(t, ns, func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil || !podReady(p) },
			func(p *corev1.Pod) string { return p.Name })
		return unsettled == "", "not Ready or going: " + unsettled, nil
	})
	appPods := podNames(t, ns)
	// the workload keeps answering while the controller is away
	stopAsking := askAllAlong(t, ns, "v4")
	began := time.Now()
	if err := suite.client.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new controller Pod Ready", func(ctx context.Context) (bool, string, error) {
		p, err := controllerPod(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		return p.UID != pod.UID, "", nil
	})
	figure("controller Pod deleted to new Pod Ready", time.Since(began))
	waitFor(t, "every artifact served again", func(ctx context.Context) (bool, string, error) {
		return allArtifactsServed(ctx)
	})
	figure("controller Pod deleted to every artifact served", time.Since(began))
	stopAsking()
	if now := podNames(t, ns); now != appPods {
		t.Errorf("the application's Pods changed while the controller was replaced: %s -> %s", appPods, now)
	}
}

// allArtifactsServed checks that every ExternalArtifact the controller publishes answers at its
// URL with the bytes of its digest.
func allArtifactsServed(ctx context.Context) (bool, string, error) {
	var eas sourcev1.ExternalArtifactList
	if err := suite.client.List(ctx, &eas); err != nil {
		return false, "", err
	}
	if len(eas.Items) == 0 {
		return false, "no ExternalArtifacts", nil
	}
	for _, ea := range eas.Items {
		if ref := ea.Spec.SourceRef; ref == nil || ref.Kind != kclv1.KCLArtifactKind {
			continue // not this controller's: a tenant's own, forged in forgery_test.go
		}
		a := ea.Status.Artifact
		if a == nil {
			return false, ea.Namespace + "/" + ea.Name + " has no artifact", nil
		}
		if err := fetchDigest(ctx, a.URL, a.Digest); err != nil {
			return false, err.Error(), nil
		}
	}
	return true, "", nil
}

func fetchDigest(ctx context.Context, url, digest string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := suite.node.HTTPClient(10 * time.Second).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	h := sha256.New()
	if _, err := io.Copy(h, resp.Body); err != nil {
		return err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
		return fmt.Errorf("%s: digest %s, want %s", url, got, digest)
	}
	return nil
}

func podNames(t *testing.T, ns string) string {
	t.Helper()
	return podsIn(t, ns, nil, func(p *corev1.Pod) string { return p.Name })
}
