package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/runtime/conditions"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// TestPodSecurity: kcl-system enforces the restricted Pod Security Standard (a Pod that breaks
// it is refused there), and the controller's Deployment from config/manager is admitted
// unchanged: its Pod runs with the template as written, and a server-side dry run of the
// template, as a Pod and as the Deployment, draws no warning.
func TestPodSecurity(t *testing.T) {
	ctx := context.Background()
	var ns corev1.Namespace
	if err := suite.client.Get(ctx, client.ObjectKey{Name: controllerNS}, &ns); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"enforce", "audit", "warn"} {
		if got := ns.Labels["pod-security.kubernetes.io/"+mode]; got != "restricted" {
			t.Errorf("namespace %s: pod-security.kubernetes.io/%s=%q, want restricted", controllerNS, mode, got)
		}
	}

	// the negative control: without it, "admitted" could mean "nothing is enforced"
	bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: controllerNS, Name: "not-restricted"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: controllerImage}}}}
	err := suite.client.Create(ctx, bad)
	if err == nil {
		_ = suite.client.Delete(ctx, bad)
		t.Fatalf("a Pod without runAsNonRoot, seccomp profile or dropped capabilities was admitted in %s", controllerNS)
	}
	if !strings.Contains(err.Error(), `violates PodSecurity "restricted:latest"`) {
		t.Fatalf("refused, but not by PodSecurity: %v", err)
	}
	t.Logf("a Pod breaking restricted is refused: %v", err)

	want := configDeployment(t)
	live := liveDeployment(t)
	compareTemplates(t, want.Spec.Template.Spec, live.Spec.Template.Spec)
	pod, err := controllerPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Status.Phase != corev1.PodRunning {
		t.Fatalf("the controller Pod %s is %s", pod.Name, pod.Status.Phase)
	}

	asPod := map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "template-dry-run", "namespace": controllerNS},
		"spec":     want.Spec.Template.Spec}
	if warnings := dryRunCreate(t, asPod); warnings != "" {
		t.Errorf("config/manager's Pod template draws warnings in %s:\n%s", controllerNS, warnings)
	}
	want.Namespace, want.Name = controllerNS, "deployment-dry-run"
	if warnings := dryRunCreate(t, want); warnings != "" {
		t.Errorf("config/manager's Deployment draws warnings in %s:\n%s", controllerNS, warnings)
	}
	// the same dry run of a Deployment breaking restricted warns: an empty stderr above is an answer
	badDeployment := want.DeepCopy()
	badDeployment.Spec.Template.Spec = bad.Spec
	if warnings := dryRunCreate(t, badDeployment); !strings.Contains(warnings, `would violate PodSecurity "restricted:latest"`) {
		t.Errorf("a Deployment breaking restricted drew no PodSecurity warning (warn label not in force?): %q", warnings)
	} else {
		t.Logf("a Deployment breaking restricted warns: %s", strings.TrimSpace(warnings))
	}
}

// configDeployment is config/manager's Deployment as the repository has it.
func configDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(suite.repo, "config", "manager", "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

func liveDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	key := client.ObjectKey{Namespace: controllerNS, Name: "kcl-artifact-controller"}
	if err := suite.client.Get(context.Background(), key, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// compareTemplates checks what Pod Security looks at, and the sizing, between config/manager's
// template and the installed one. The install changes the image, empties --events-addr (there is
// no notification-controller here) and adds the tenant lockdown's --no-cross-namespace-refs=true;
// nothing else may differ.
func compareTemplates(t *testing.T, want, got corev1.PodSpec) {
	t.Helper()
	if !equality.Semantic.DeepEqual(want.SecurityContext, got.SecurityContext) {
		t.Errorf("Pod securityContext: installed %+v, config/manager %+v", got.SecurityContext, want.SecurityContext)
	}
	if len(got.Containers) != 1 || len(want.Containers) != 1 {
		t.Fatalf("containers: installed %d, config/manager %d", len(got.Containers), len(want.Containers))
	}
	w, g := want.Containers[0], got.Containers[0]
	if !equality.Semantic.DeepEqual(w.SecurityContext, g.SecurityContext) {
		t.Errorf("container securityContext: installed %+v, config/manager %+v", g.SecurityContext, w.SecurityContext)
	}
	if !equality.Semantic.DeepEqual(w.Resources, g.Resources) {
		t.Errorf("resources: installed %+v, config/manager %+v", g.Resources, w.Resources)
	}
	normal := func(args []string) string {
		// the lockdown's flag and the suite's own (nodeinstall.Installer.ControllerArgs) are the install's
		args = slices.DeleteFunc(slices.Clone(args), func(a string) bool {
			return a == "--no-cross-namespace-refs=true" || slices.Contains(suite.install.ControllerArgs, a)
		})
		return eventsAddrArg.ReplaceAllString(strings.Join(args, " "), "--events-addr=")
	}
	if normal(w.Args) != normal(g.Args) {
		t.Errorf("args: installed %q, config/manager %q", g.Args, w.Args)
	}
	if !equality.Semantic.DeepEqual(want.Volumes, got.Volumes) {
		t.Errorf("volumes: installed %+v, config/manager %+v", got.Volumes, want.Volumes)
	}
	for _, e := range w.Env {
		if e.ValueFrom == nil && !containsEnv(g.Env, e) {
			t.Errorf("env %s=%q of config/manager is not in the installed template", e.Name, e.Value)
		}
	}
}

func containsEnv(env []corev1.EnvVar, e corev1.EnvVar) bool {
	for _, g := range env {
		if g.Name == e.Name && g.Value == e.Value {
			return true
		}
	}
	return false
}

// dryRunCreate creates obj with `kubectl create --dry-run=server` and returns what kubectl
// printed on stderr: the API server's warnings. A refusal fails the test.
func dryRunCreate(t *testing.T, obj any) string {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, suite.install.Kubectl, "--kubeconfig", suite.install.Kubeconfig,
		"create", "--dry-run=server", "-o", "name", "-f", "-")
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(data), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl create --dry-run=server: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	return stderr.String()
}

var eventsAddrArg = regexp.MustCompile(`--events-addr=\S*`)

const (
	// Fillers render successfully and leave their worker idle with what they allocated (about 80
	// bytes an item, measured): a large one about 480 MB, below the 768 MiB recycling size, a
	// small one about 200 MB, below --kcl-idle-memory alone but not two together.
	largeFillerItems = 6_000_000
	smallFillerItems = 2_500_000
	fillers          = 8
	// hogLists of a thousand strings each are well past the 1 GiB worker limit of config/manager,
	// reached in small steps over about 12 s (lambda calls slow it down; measured with render
	// --memory-limit), so that both hogs hold most of their limit at the same time.
	hogLists = 1_000_000
)

// TestWorkersAtTheirLimit plays a tenant that spends all the memory the workers may have, with
// config/default's limits: first programs in eight namespaces that each leave an idle worker of
// 200 or 480 MB behind, then programs in two namespaces (both workers at once) that allocate in
// small steps past the worker limit. Each hog fails by its own limit with a clear reason, and
// the Pod's memory cgroup never reaches its limit: no OOM kill, the controller container is not
// restarted, and the controller serves on.
func TestWorkersAtTheirLimit(t *testing.T) {
	ctx := context.Background()
	pod, err := controllerPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := managerStatus(t, pod)
	cg := podMemoryCgroup(t, pod)
	limit := cgroupValue(t, cg, "memory.limit_in_bytes")
	want := configDeployment(t).Spec.Template.Spec.Containers[0].Resources.Limits.Memory()
	if limit != uint64(want.Value()) {
		t.Fatalf("the Pod's memory cgroup limit is %d, want config/manager's %s", limit, want)
	}
	// the peak is measured from here
	if err := os.WriteFile(filepath.Join(cg, "memory.max_usage_in_bytes"), []byte("0"), 0o644); err != nil {
		t.Fatal(err)
	}
	oomBefore, failBefore := oomKills(t, cg), cgroupValue(t, cg, "memory.failcnt")

	var fillerNS []string
	for i := range fillers {
		items := largeFillerItems
		if i%2 == 1 {
			items = smallFillerItems
		}
		fillerNS = append(fillerNS, hostileSource(t, fmt.Sprintf("sizing-filler-%d", i), fillerProgram(items)))
	}
	killsBefore := workerKills(t, pod)
	began := time.Now()
	for _, ns := range fillerNS {
		create(t, hostileKCLArtifact(ns))
	}
	for _, ns := range fillerNS {
		if obj := waitRendered(t, ns); !conditions.IsReady(obj) {
			t.Errorf("%s: a program within the worker limit failed: %s", ns, readyMessage(obj))
		}
	}
	figure("sizing: 8 idle-worker fillers created to rendered", time.Since(began))
	kills := workerKills(t, pod)
	recycled, evicted := int(kills["recycled"]-killsBefore["recycled"]), int(kills["evicted"]-killsBefore["evicted"])
	figureCount("sizing: fillers' workers recycled (over --kcl-idle-memory alone)", recycled)
	figureCount("sizing: fillers' idle workers evicted (together over it)", evicted)
	if recycled < fillers/2 || evicted < fillers/2-1 {
		t.Errorf("the idle workers were not held to --kcl-idle-memory: %d recycled (want %d or more), %d evicted (want %d or more)",
			recycled, fillers/2, evicted, fillers/2-1)
	}

	// both sources first, then both KCLArtifacts: their renders start together
	hogs := []string{hostileSource(t, "sizing-hog-a", hogProgram), hostileSource(t, "sizing-hog-b", hogProgram)}
	began = time.Now()
	for _, ns := range hogs {
		create(t, hostileKCLArtifact(ns))
	}
	for _, ns := range hogs {
		obj := waitRendered(t, ns)
		msg := readyMessage(obj)
		if conditions.IsReady(obj) || !strings.Contains(msg, "(MemoryLimit)") || !strings.Contains(msg, "1.0 GiB") {
			t.Errorf("%s: want the render refused by the worker memory limit, got %s", ns, msg)
		}
		t.Logf("%s: Ready=False %s", ns, msg)
	}
	figure("sizing: 2 hogs created to both refused", time.Since(began))

	peak := cgroupValue(t, cg, "memory.max_usage_in_bytes")
	figureCount("sizing: Pod memory cgroup peak (MiB)", int(peak>>20))
	// one hog at its limit and the other well on its way: the renders overlapped
	if atOnce := uint64(3 << 29); peak < atOnce {
		t.Errorf("the Pod's memory peaked at %d MiB: the hogs did not run at once (%d MiB), the test proves less than it says",
			peak>>20, atOnce>>20)
	}
	figureCount("sizing: Pod memory cgroup limit (MiB)", int(limit>>20))
	figureCount("sizing: Pod memory cgroup failcnt", int(cgroupValue(t, cg, "memory.failcnt")-failBefore))
	if kills := oomKills(t, cg) - oomBefore; kills != 0 {
		t.Errorf("the Pod's memory cgroup OOM-killed %d processes: the limits of config/manager do not add up", kills)
	}
	if peak >= limit {
		t.Errorf("the Pod's memory reached its limit (%d MiB)", peak>>20)
	}
	now, err := controllerPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := managerStatus(t, now)
	if now.UID != pod.UID || after.ContainerID != before.ContainerID || after.RestartCount != before.RestartCount ||
		after.LastTerminationState.Terminated != nil {
		t.Errorf("the controller container changed: before %s restarts %d, after %s restarts %d, last state %+v",
			before.ContainerID, before.RestartCount, after.ContainerID, after.RestartCount, after.LastTerminationState)
	}
	t.Logf("the controller container: %s, %d restarts before and %d after, no last termination",
		after.ContainerID, before.RestartCount, after.RestartCount)
	servesOn(t)
}

func fillerProgram(items int) func(ns string) string {
	return func(ns string) string {
		return fmt.Sprintf(`_n = len([i for i in range(%d)])
[{apiVersion = "v1", kind = "ConfigMap", metadata = {name = "filler", namespace = %q}, data.n = str(_n)}]
`, items, ns)
	}
}

// hogProgram first spends seconds of CPU in little memory, so that the second hog's render has
// started before the first allocates (a worker's start is a second or two on a loaded node), then
// allocates in small steps past the worker limit.
func hogProgram(ns string) string {
	return fmt.Sprintf(`_w = sum([sum([j %% 7 for j in range(20000)]) for k in range(150)])
_h = lambda x: int -> int { x + 1 }
_f = lambda x: int -> str { str(_h(_h(x))) }
_l = [[_f(j) for j in range(1000)] for i in range(%d + _w * 0)]
[{apiVersion = "v1", kind = "ConfigMap", metadata = {name = "hog", namespace = %q}, data.n = str(len(_l))}]
`, hogLists, ns)
}

// hostileSource makes namespace name with a repository holding program, and waits until
// source-controller has its artifact. The namespace goes when the test ends, so that no hog keeps
// retrying for later tests.
func hostileSource(t *testing.T, name string, program func(ns string) string) string {
	t.Helper()
	ns := newNamespace(t, name)
	t.Cleanup(func() {
		_ = suite.client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	createRepo(t, ns, name, "node-app", map[string]string{"hostile/main.k": program(ns)})
	waitFor(t, ns+"/"+name+" fetched", func(ctx context.Context) (bool, string, error) {
		var gr sourcev1.GitRepository
		if err := suite.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &gr); err != nil {
			return false, "", err
		}
		return gr.Status.Artifact != nil, "no artifact yet", nil
	})
	return ns
}

// hostileKCLArtifact renders the program of hostileSource.
func hostileKCLArtifact(ns string) *kclv1.KCLArtifact {
	return kclArtifact(ns, "hostile", ns, func(o *kclv1.KCLArtifact) { o.Spec.Path = "hostile" })
}

// waitRendered waits until the KCLArtifact hostile of ns has finished its first render, either way.
func waitRendered(t *testing.T, ns string) *kclv1.KCLArtifact {
	t.Helper()
	var obj *kclv1.KCLArtifact
	waitFor(t, ns+"/hostile rendered or refused", func(ctx context.Context) (bool, string, error) {
		var err error
		if obj, err = getKCLArtifact(ctx, ns, "hostile"); err != nil {
			return false, "", client.IgnoreNotFound(err)
		}
		r := conditions.GetReason(obj, meta.ReadyCondition)
		return conditions.IsReady(obj) || r == kclv1.RenderFailedReason, kclState(obj), nil
	})
	return obj
}

// servesOn: after the attack, a new KCLArtifact renders and its artifact answers at its URL.
func servesOn(t *testing.T) {
	t.Helper()
	ns := newNamespace(t, "sizing-after")
	createRepo(t, ns, "after", "node-app", map[string]string{"after/main.k": fmt.Sprintf(
		`[{apiVersion = "v1", kind = "ConfigMap", metadata = {name = "after", namespace = %q}, data.ok = "yes"}]`+"\n", ns)})
	create(t, kclArtifact(ns, "after", "after", func(o *kclv1.KCLArtifact) { o.Spec.Path = "after" }))
	d := waitFor(t, "a KCLArtifact rendered after the attack, its artifact served", func(ctx context.Context) (bool, string, error) {
		var ea sourcev1.ExternalArtifact
		if err := suite.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "after"}, &ea); err != nil {
			return false, "", client.IgnoreNotFound(err)
		}
		if ea.Status.Artifact == nil {
			return false, "no artifact yet", nil
		}
		if err := fetchDigest(ctx, ea.Status.Artifact.URL, ea.Status.Artifact.Digest); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	figure("sizing: after the attack, KCLArtifact created to artifact served", d)
}

// workerKills is kcl_artifact_controller_worker_kills_total of the controller Pod, by reason.
func workerKills(t *testing.T, pod *corev1.Pod) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	text, err := scrapeController(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	kills := map[string]float64{}
	for _, reason := range []string{"recycled", "evicted"} {
		kills[reason] = metricSum(text, "kcl_artifact_controller_worker_kills_total", map[string]string{"reason": reason})
	}
	return kills
}

func managerStatus(t *testing.T, pod *corev1.Pod) corev1.ContainerStatus {
	t.Helper()
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == "manager" {
			return s
		}
	}
	t.Fatalf("the controller Pod %s has no status of its container manager", pod.Name)
	return corev1.ContainerStatus{}
}

// podMemoryCgroup is the directory of the Pod's cgroup in the memory hierarchy (cgroup v1, as
// kubelet runs here): pod<UID> somewhere under the memory hierarchy's kubepods.
func podMemoryCgroup(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	var found string
	want := "pod" + string(pod.UID)
	_ = filepath.WalkDir("/sys/fs/cgroup/memory", func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if d.Name() == want {
			found = path
			return filepath.SkipAll
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no memory cgroup %s under /sys/fs/cgroup/memory", want)
	}
	t.Logf("the controller Pod's memory cgroup: %s", found)
	return found
}

func cgroupValue(t *testing.T, dir, file string) uint64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatalf("%s/%s: %v", dir, file, err)
	}
	return v
}

// oomKills adds up the oom_kill counts (memory.oom_control) of a memory cgroup and its children:
// under cgroup v1 a kill is counted in the victim's own cgroup (the container's), not its parents'.
func oomKills(t *testing.T, dir string) uint64 {
	t.Helper()
	var n uint64
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			n += oomKillCount(t, path)
		}
		return nil
	})
	return n
}

func oomKillCount(t *testing.T, dir string) uint64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "memory.oom_control"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("%s/memory.oom_control has no oom_kill count:\n%s", dir, data)
	return 0
}
