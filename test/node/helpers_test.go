package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// waitFor polls cond every half second until it holds or waitTimeout passes; state describes
// what was seen last, for the failure message.
func waitFor(t *testing.T, what string, cond func(ctx context.Context) (ok bool, state string, err error)) time.Duration {
	t.Helper()
	began := time.Now()
	if err := poll(context.Background(), waitTimeout, what, cond); err != nil {
		t.Fatal(err)
	}
	return time.Since(began)
}

// newNamespace creates a namespace whose default account may do anything in it
// (createTenantNamespace).
func newNamespace(t *testing.T, name string) string {
	t.Helper()
	if err := createTenantNamespace(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	return name
}

// createRepo makes a Git repository from a fixture directory plus files, and a GitRepository
// named like it in ns, pulling every few seconds.
func createRepo(t *testing.T, ns, name, fixture string, files map[string]string) string {
	t.Helper()
	if _, err := suite.git.CreateRepo(name, filepath.Join(suite.repo, "fixtures", fixture)); err != nil {
		t.Fatal(err)
	}
	sha := commit(t, name, "arguments", files)
	gr := &sourcev1.GitRepository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: sourcev1.GitRepositorySpec{URL: suite.git.URL(name), Interval: metav1.Duration{Duration: 5 * time.Second},
			Reference: &sourcev1.GitRepositoryRef{Branch: fluxenv.DefaultBranch}}}
	if err := suite.client.Create(context.Background(), gr); err != nil {
		t.Fatal(err)
	}
	return sha
}

func commit(t *testing.T, repo, message string, files map[string]string) string {
	t.Helper()
	sha, err := suite.git.CommitFiles(repo, message, files)
	if err != nil {
		t.Fatal(err)
	}
	return sha
}

func gitRevision(sha string) string { return fluxenv.DefaultBranch + "@sha1:" + sha }

// settingsFile is a KCL settings file (kcl.yaml) holding the program's arguments, so that a commit
// changes them.
func settingsFile(args map[string]any) string {
	var b strings.Builder
	b.WriteString("kcl_options:\n")
	for k, v := range args {
		if s, ok := v.(string); ok {
			v = strconv.Quote(s)
		}
		fmt.Fprintf(&b, "  - key: %s\n    value: %v\n", k, v)
	}
	return b.String()
}

func kclArtifact(ns, name, source string, mutate func(*kclv1.KCLArtifact)) *kclv1.KCLArtifact {
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: kclv1.KCLArtifactSpec{
			SourceRef: kclv1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: source},
			Path:      "./", Interval: metav1.Duration{Duration: time.Minute},
		}}
	if mutate != nil {
		mutate(obj)
	}
	return obj
}

// appArtifact is the KCLArtifact app of fixtures/node-app in the Git repository source: its
// arguments from kcl.yaml, applied into ns and waited for.
func appArtifact(ns, source string) *kclv1.KCLArtifact {
	return kclArtifact(ns, "app", source, func(o *kclv1.KCLArtifact) {
		o.Spec.Settings = []string{"kcl.yaml"}
		o.Spec.Kustomization = &kclv1.KustomizationTemplate{Wait: true, TargetNamespace: ns,
			Timeout: &metav1.Duration{Duration: 2 * time.Minute}, RetryInterval: &metav1.Duration{Duration: 10 * time.Second}}
	})
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := suite.client.Create(context.Background(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

func getKCLArtifact(ctx context.Context, ns, name string) (*kclv1.KCLArtifact, error) {
	var obj kclv1.KCLArtifact
	err := suite.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &obj)
	return &obj, err
}

// kclState is one line of a KCLArtifact's conditions.
func kclState(obj *kclv1.KCLArtifact) string {
	var parts []string
	for _, c := range obj.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message))
	}
	return fmt.Sprintf("sourceRevision %s; %s", obj.Status.SourceRevision, strings.Join(parts, "; "))
}

// waitApplied waits until the KCLArtifact rendered sourceRevision and its Kustomization applied
// it (KustomizationReady=True).
func waitApplied(t *testing.T, ns, name, sourceRevision string) (*kclv1.KCLArtifact, time.Duration) {
	t.Helper()
	var obj *kclv1.KCLArtifact
	d := waitFor(t, ns+"/"+name+" applied at "+sourceRevision, func(ctx context.Context) (bool, string, error) {
		var err error
		if obj, err = getKCLArtifact(ctx, ns, name); err != nil {
			return false, "", err
		}
		return obj.Status.SourceRevision == sourceRevision && conditions.IsReady(obj) &&
			conditions.IsTrue(obj, kclv1.KustomizationReadyCondition), kclState(obj), nil
	})
	return obj, d
}

// answer is what test/nodeimage/demoapp answers.
type answer struct {
	Message string `json:"message"`
	Schema  string `json:"schema"`
	Pod     string `json:"pod"`
}

// askApp calls the demo application through its Service, by name, from inside the node's network.
func askApp(ctx context.Context, ns string) (answer, error) {
	var a answer
	url := fmt.Sprintf("http://demo-app.%s.svc.cluster.local/", ns)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return a, err
	}
	resp, err := suite.node.HTTPClient(5 * time.Second).Do(req)
	if err != nil {
		return a, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return a, json.Unmarshal(body, &a)
}

// waitAnswers waits until every answer of the application, asked several times in a row (the
// Service spreads them over the Pods), carries message and schema (the schema the Pods read from
// the migration's ConfigMap when they started; "" without the migration).
func waitAnswers(t *testing.T, ns, message, schema string) time.Duration {
	t.Helper()
	return waitFor(t, fmt.Sprintf("demo-app in %s answering %q at schema %q", ns, message, schema), func(ctx context.Context) (bool, string, error) {
		for range 6 {
			a, err := askApp(ctx, ns)
			if err != nil {
				return false, "", err
			}
			if a.Message != message || a.Schema != schema {
				return false, fmt.Sprintf("pod %s answered %q at schema %q", a.Pod, a.Message, a.Schema), nil
			}
		}
		return true, "", nil
	})
}

// controllerLogs is the log of the running controller Pod.
func controllerLogs(t *testing.T) string {
	t.Helper()
	out, err := suite.install.Run(context.Background(), "-n", controllerNS, "logs", "deployment/kcl-artifact-controller")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readyMessage(obj *kclv1.KCLArtifact) string {
	return conditions.GetReason(obj, meta.ReadyCondition) + ": " + conditions.GetMessage(obj, meta.ReadyCondition)
}

// patchSpec merges a JSON patch of the spec into a KCLArtifact (as `kubectl patch --type merge`).
func patchSpec(t *testing.T, ns, name, spec string) {
	t.Helper()
	obj := &kclv1.KCLArtifact{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	patch := []byte(`{"spec":` + spec + `}`)
	if err := suite.client.Patch(context.Background(), obj, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatalf("patching %s/%s: %v", ns, name, err)
	}
}

// historyEntry is the entry of status.history with this digest.
func historyEntry(obj *kclv1.KCLArtifact, digest string) (kclv1.ArtifactHistoryEntry, bool) {
	for _, e := range obj.Status.History {
		if e.Digest == digest {
			return e, true
		}
	}
	return kclv1.ArtifactHistoryEntry{}, false
}

// historyOf is one line per entry of status.history, for messages.
func historyOf(obj *kclv1.KCLArtifact) string {
	var parts []string
	for _, e := range obj.Status.History {
		parts = append(parts, fmt.Sprintf("%s from %s health=%q missing=%t", e.Digest, e.SourceRevision, e.Health, e.Missing))
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// scrapeController reads the metrics of a controller Pod from its metrics port (http-prom),
// from inside the node's network, as Prometheus scrapes it.
func scrapeController(ctx context.Context, pod *corev1.Pod) (string, error) {
	url := fmt.Sprintf("http://%s/metrics", net.JoinHostPort(pod.Status.PodIP, "8080"))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := suite.node.HTTPClient(10 * time.Second).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	// the sandbox gauge is set at start: without it, this is not the controller's registry
	if !strings.Contains(string(body), "\nkcl_artifact_controller_render_sandbox{") {
		return "", fmt.Errorf("%s: no kcl_artifact_controller_render_sandbox in the metrics", url)
	}
	return string(body), nil
}

// metricSum adds up the samples of a metric (Prometheus text format) whose labels include
// every pair of match.
func metricSum(text, name string, match map[string]string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		labels, value := "", line[len(name):]
		if strings.HasPrefix(value, "{") {
			end := strings.LastIndex(value, "}")
			if end < 0 {
				continue
			}
			labels, value = value[1:end], value[end+1:]
		}
		ok := true
		for k, v := range match {
			if !slices.Contains(strings.Split(labels, ","), fmt.Sprintf("%s=%q", k, v)) {
				ok = false
			}
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(value), 64); ok && err == nil {
			sum += f
		}
	}
	return sum
}

// rendersIn is the number of renders the controller Pod made for a namespace since it started
// (kcl_artifact_controller_renders_total, every result).
func rendersIn(t *testing.T, pod *corev1.Pod, ns string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	text, err := scrapeController(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	return int(metricSum(text, "kcl_artifact_controller_renders_total", map[string]string{"namespace": ns}))
}

// replaceControllerPod deletes the running controller Pod and waits until it is gone and its
// replacement is Ready. It returns the new Pod and when the deletion was asked.
func replaceControllerPod(t *testing.T) (*corev1.Pod, time.Time) {
	t.Helper()
	ctx := context.Background()
	old, err := controllerPod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := suite.client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	waitFor(t, "the controller Pod "+old.Name+" gone and a new one Ready", func(ctx context.Context) (bool, string, error) {
		var p corev1.Pod
		err := suite.client.Get(ctx, client.ObjectKeyFromObject(old), &p)
		if err == nil && p.UID == old.UID {
			return false, "the old Pod is still there", nil
		}
		if client.IgnoreNotFound(err) != nil {
			return false, "", err
		}
		if pod, err = controllerPod(ctx); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	return pod, began
}

// podUIDs are the UIDs of the Pods of a namespace, sorted, for comparison.
func podUIDs(t *testing.T, ns string) string {
	t.Helper()
	// the last rollout may still run (an old Pod answers beside the new ones until it is
	// replaced) or leave a Pod terminating: the set compared is the one it leaves
	waitFor(t, "every Deployment in "+ns+" rolled out, no Pod terminating", func(ctx context.Context) (bool, string, error) {
		var deps appsv1.DeploymentList
		if err := suite.client.List(ctx, &deps, client.InNamespace(ns)); err != nil {
			return false, "", err
		}
		for _, d := range deps.Items {
			want := ptr.Deref(d.Spec.Replicas, 1)
			st := d.Status
			if st.ObservedGeneration != d.Generation || st.Replicas != want || st.UpdatedReplicas != want || st.AvailableReplicas != want {
				return false, fmt.Sprintf("Deployment %s: %d replicas, %d updated, %d available, want %d", d.Name, st.Replicas, st.UpdatedReplicas, st.AvailableReplicas, want), nil
			}
		}
		terminating := podsIn(t, ns, func(p *corev1.Pod) bool { return p.DeletionTimestamp != nil }, podUID)
		return terminating == "", "terminating: " + terminating, nil
	})
	return podsIn(t, ns, nil, podUID)
}

func podUID(p *corev1.Pod) string { return p.Name + "=" + string(p.UID) }

// podsIn lists the Pods of a namespace that keep accepts (all for nil), each as key says, sorted
// and joined.
func podsIn(t *testing.T, ns string, keep func(*corev1.Pod) bool, key func(*corev1.Pod) string) string {
	t.Helper()
	var pods corev1.PodList
	if err := suite.client.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := range pods.Items {
		if keep == nil || keep(&pods.Items[i]) {
			out = append(out, key(&pods.Items[i]))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}
