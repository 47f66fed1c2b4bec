package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// originRevisionKey is the artifact metadata key carrying the source revision.
const originRevisionKey = "org.opencontainers.image.revision"

// program is the KCL program of the tests: ConfigMaps named after option("name"), in
// option("namespace"), with data from option("env") and option("greeting").
type program struct {
	version    string // data.version of <name>-config
	extra      bool   // also render <name>-extra
	deployment bool   // also render Deployment <name>-web
	broken     bool   // append a type error (see brokenLine)
}

const programHead = `_ns = option("namespace", type="str", required=True)
_name = option("name", type="str", default="app")
_env = option("env", type="str", default="dev")
_greeting = option("greeting", type="str", default="hello")
_labels = {"app.kubernetes.io/part-of" = "kcl-e2e"}

items = [
    {
        apiVersion = "v1"
        kind = "ConfigMap"
        metadata = {name = "${_name}-config", namespace = _ns, labels = _labels}
        data = {env = _env, greeting = _greeting, version = "%s"}
    }
`

const programExtra = `    {
        apiVersion = "v1"
        kind = "ConfigMap"
        metadata = {name = "${_name}-extra", namespace = _ns, labels = _labels}
        data = {env = _env}
    }
`

// programDeployment is a workload; nothing runs its pods here, and nothing waits for them.
const programDeployment = `    {
        apiVersion = "apps/v1"
        kind = "Deployment"
        metadata = {name = "${_name}-web", namespace = _ns, labels = _labels}
        spec = {
            selector.matchLabels = {app = "${_name}-web"}
            template = {
                metadata.labels = {app = "${_name}-web"}
                spec.containers = [{name = "web", image = "nginx:1.27"}]
            }
        }
    }
`

// brokenStatement is a KCL type error, appended as the last line of a broken program.
const brokenStatement = `_replicas: int = "three"`

func (p program) String() string {
	s := fmt.Sprintf(programHead, p.version)
	if p.extra {
		s += programExtra
	}
	if p.deployment {
		s += programDeployment
	}
	s += "]\n"
	if p.broken {
		s += brokenStatement + "\n"
	}
	return s
}

// brokenPosition is where KCL reports the error of a broken program: main.k:<line>:1.
func (p program) brokenPosition() string {
	q := p
	q.broken = false
	return fmt.Sprintf("main.k:%d:1", strings.Count(q.String(), "\n")+1)
}

func (p program) files() map[string]string { return map[string]string{"main.k": p.String()} }

// newNamespace creates a fresh namespace for one test.
func newNamespace(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := prefix + "-" + hex.EncodeToString(b)
	if err := suite.env.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	return name
}

// createRepo creates a Git repository named after the namespace holding files, and returns its
// commit SHA.
func createRepo(t *testing.T, name string, files map[string]string) string {
	t.Helper()
	sha, err := suite.env.Git.CreateRepo(name, writeFiles(t, files))
	if err != nil {
		t.Fatalf("creating Git repository %s: %v", name, err)
	}
	return sha
}

// commit commits files to repo and returns the Flux revision of the commit.
func commit(t *testing.T, repo, message string, files map[string]string, remove ...string) string {
	t.Helper()
	sha, err := suite.env.Git.CommitFiles(repo, message, files, remove...)
	if err != nil {
		t.Fatalf("committing %q to %s: %v", message, repo, err)
	}
	return gitRevision(sha)
}

func gitRevision(sha string) string { return fluxenv.DefaultBranch + "@sha1:" + sha }

// createGitRepository creates a GitRepository of repo polled every 2s.
func createGitRepository(t *testing.T, ns, name, repo string) {
	t.Helper()
	gr := &sourcev1.GitRepository{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: sourcev1.GitRepositorySpec{
			URL:       suite.env.Git.URL(repo),
			Interval:  metav1.Duration{Duration: 2 * time.Second},
			Timeout:   &metav1.Duration{Duration: 30 * time.Second},
			Reference: &sourcev1.GitRepositoryRef{Branch: fluxenv.DefaultBranch},
		},
	}
	if err := suite.env.Client.Create(t.Context(), gr); err != nil {
		t.Fatalf("creating GitRepository %s/%s: %v", ns, name, err)
	}
}

// newKCLArtifact returns a KCLArtifact of GitRepository source with the namespace argument set.
func newKCLArtifact(ns, name, source string, args map[string]string) *kclv1.KCLArtifact {
	a := map[string]string{"namespace": ns}
	maps.Copy(a, args)
	return &kclv1.KCLArtifact{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kclv1.KCLArtifactSpec{
			SourceRef:     kclv1.SourceReference{Kind: sourcev1.GitRepositoryKind, Name: source},
			Interval:      metav1.Duration{Duration: 10 * time.Second},
			RetryInterval: &metav1.Duration{Duration: 5 * time.Second},
			Arguments:     a,
		},
	}
}

func create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := suite.env.Client.Create(t.Context(), obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, objectName(obj), err)
	}
}

// waitFor polls cond until it is done; on timeout the test fails with the last state and the
// logs of the controllers about namespace ns.
func waitFor(t *testing.T, ns, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	if err := fluxenv.WaitFor(t.Context(), waitTimeout, what, cond); err != nil {
		t.Fatalf("%v\n%s", err, diagnostics(ns))
	}
}

// diagnostics gathers what the controllers logged about namespace ns, and their last lines.
func diagnostics(ns string) string {
	var b strings.Builder
	logs := []struct{ name, path string }{
		{controllerName, kclController().LogPath},
		{"kustomize-controller", suite.env.KustomizeController.LogPath},
		{"source-controller", suite.env.SourceController.LogPath},
	}
	for _, l := range logs {
		writeLogLines(&b, l.name, l.path, ns)
	}
	// a test's own controller (a shard, a restart) logs elsewhere: those that name ns
	seen := map[string]bool{logs[0].path: true}
	for _, p := range suite.env.KCLControllerProcesses() {
		if !seen[p.LogPath] && len(grepLines(p.LogPath, ns)) > 0 {
			writeLogLines(&b, p.Name, p.LogPath, ns)
		}
		seen[p.LogPath] = true
	}
	for _, l := range logs[:2] {
		fmt.Fprintf(&b, "--- last 15 lines of %s:\n%s\n", l.path, fluxenv.Tail(l.path, 15))
	}
	return b.String()
}

// writeLogLines writes the last 25 lines of the log at path that contain ns.
func writeLogLines(b *strings.Builder, name, path, ns string) {
	lines := grepLines(path, ns)
	if len(lines) > 25 {
		lines = lines[len(lines)-25:]
	}
	fmt.Fprintf(b, "--- %s log lines about %s (last %d):\n%s\n", name, ns, len(lines), strings.Join(lines, "\n"))
}

// grepLines returns the lines of a file containing s.
// waitLogLine waits until the log at path has a line containing every one of parts.
func waitLogLine(t *testing.T, ns, path, what string, parts ...string) {
	t.Helper()
	waitFor(t, ns, what, func(context.Context) (bool, string, error) {
		for _, line := range grepLines(path, parts[0]) {
			if containsAll(line, parts[1:]) {
				return true, "", nil
			}
		}
		return false, fmt.Sprintf("no line of %s has all of %q", path, parts), nil
	})
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func grepLines(path, s string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return []string{fmt.Sprintf("(cannot read %s: %v)", path, err)}
	}
	var out []string
	for line := range strings.SplitSeq(string(data), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

func conditionString(c *metav1.Condition) string {
	if c == nil {
		return "no condition"
	}
	return fmt.Sprintf("%s=%s (%s): %s", c.Type, c.Status, c.Reason, c.Message)
}

func artifactString(a *meta.Artifact) string {
	if a == nil {
		return "no artifact"
	}
	return fmt.Sprintf("artifact %s %s origin %q", a.Revision, a.URL, a.Metadata[originRevisionKey])
}

// kclArtifactState summarises a KCLArtifact for wait messages.
func kclArtifactState(obj *kclv1.KCLArtifact) string {
	return fmt.Sprintf("generation %d observed %d; %s; %s; sourceRevision %q lastAttempted %q; %s",
		obj.Generation, obj.Status.ObservedGeneration,
		conditionString(apimeta.FindStatusCondition(obj.Status.Conditions, meta.ReadyCondition)),
		conditionString(apimeta.FindStatusCondition(obj.Status.Conditions, kclv1.KustomizationReadyCondition)),
		obj.Status.SourceRevision, obj.Status.LastAttemptedRevision, artifactString(obj.Status.Artifact))
}

// waitKCLArtifactReady waits until the KCLArtifact is Ready with an artifact rendered from
// sourceRevision, and returns it.
func waitKCLArtifactReady(t *testing.T, ns, name, sourceRevision string) *kclv1.KCLArtifact {
	t.Helper()
	obj := &kclv1.KCLArtifact{}
	waitFor(t, ns, fmt.Sprintf("KCLArtifact %s/%s Ready with an artifact of %s", ns, name, sourceRevision),
		func(ctx context.Context) (bool, string, error) {
			if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
				return false, "", err
			}
			ready := apimeta.FindStatusCondition(obj.Status.Conditions, meta.ReadyCondition)
			ok := ready != nil && ready.Status == metav1.ConditionTrue && obj.Status.ObservedGeneration == obj.Generation &&
				obj.Status.Artifact != nil && obj.Status.SourceRevision == sourceRevision
			return ok, kclArtifactState(obj), nil
		})
	return obj
}

// waitKustomizationApplied waits until the Kustomization is Ready having applied revision.
func waitKustomizationApplied(t *testing.T, ns, name, revision string) *kustomizev1.Kustomization {
	t.Helper()
	ks := &kustomizev1.Kustomization{}
	waitFor(t, ns, fmt.Sprintf("Kustomization %s/%s Ready having applied %s", ns, name, revision),
		kustomizationApplied(suite.env.Client, ns, name, revision, ks))
	return ks
}

// kustomizationApplied is the condition of a wait for Kustomization ns/name Ready having applied
// revision, read with c (the hub's client or a spoke's) into ks.
func kustomizationApplied(c client.Client, ns, name, revision string, ks *kustomizev1.Kustomization) func(ctx context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ks); err != nil {
			return false, "", err
		}
		ready := apimeta.FindStatusCondition(ks.Status.Conditions, meta.ReadyCondition)
		ok := ready != nil && ready.Status == metav1.ConditionTrue && ks.Status.LastAppliedRevision == revision
		return ok, kustomizationState(ks), nil
	}
}

func kustomizationState(ks *kustomizev1.Kustomization) string {
	return fmt.Sprintf("%s; lastAppliedRevision %q lastAttemptedRevision %q lastAppliedOriginRevision %q",
		conditionString(apimeta.FindStatusCondition(ks.Status.Conditions, meta.ReadyCondition)),
		ks.Status.LastAppliedRevision, ks.Status.LastAttemptedRevision, ks.Status.LastAppliedOriginRevision)
}

// requestKustomizationReconcile asks kustomize-controller to reconcile now and waits until it
// has handled the request; it returns the Kustomization as it was then.
func requestKustomizationReconcile(t *testing.T, ns, name string) *kustomizev1.Kustomization {
	t.Helper()
	ks := &kustomizev1.Kustomization{}
	return waitKustomizationHandled(t, ns, name, annotateReconcile(t, ks, ns, name))
}

// annotateReconcile sets reconcile.fluxcd.io/requestedAt on the object (ns/name, read into obj)
// and returns the token, without waiting for it to be handled.
func annotateReconcile(t *testing.T, obj client.Object, ns, name string) string {
	t.Helper()
	token := time.Now().Format(time.RFC3339Nano)
	if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		t.Fatalf("%T %s/%s: %v", obj, ns, name, err)
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[meta.ReconcileRequestAnnotation] = token
	obj.SetAnnotations(ann)
	if err := suite.env.Client.Patch(t.Context(), obj, patch); err != nil {
		t.Fatalf("requesting a reconciliation of %T %s/%s: %v", obj, ns, name, err)
	}
	return token
}

// waitKustomizationHandled waits until kustomize-controller has handled reconcile request token
// and says whether the Kustomization is Ready.
func waitKustomizationHandled(t *testing.T, ns, name, token string) *kustomizev1.Kustomization {
	t.Helper()
	ks := &kustomizev1.Kustomization{}
	waitFor(t, ns, fmt.Sprintf("Kustomization %s/%s to handle reconcile request %s", ns, name, token),
		func(ctx context.Context) (bool, string, error) {
			if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, ks); err != nil {
				return false, "", err
			}
			ready := apimeta.FindStatusCondition(ks.Status.Conditions, meta.ReadyCondition)
			done := ks.Status.LastHandledReconcileAt == token && ready != nil && ready.Status != metav1.ConditionUnknown
			return done, "lastHandledReconcileAt " + ks.Status.LastHandledReconcileAt + "; " + kustomizationState(ks), nil
		})
	return ks
}

// waitConfigMap waits until the ConfigMap exists with exactly data.
func waitConfigMap(t *testing.T, ns, name string, data map[string]string) {
	t.Helper()
	waitFor(t, ns, fmt.Sprintf("ConfigMap %s/%s with data %v", ns, name, data), configMapHas(suite.env.Client, ns, name, data))
}

// configMapHas is the condition of a wait for ConfigMap ns/name with exactly data, read with c
// (the hub's client or a spoke's).
func configMapHas(c client.Client, ns, name string, data map[string]string) func(ctx context.Context) (bool, string, error) {
	return func(ctx context.Context) (bool, string, error) {
		var cm corev1.ConfigMap
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
			return false, "", err
		}
		return maps.Equal(cm.Data, data) && cm.DeletionTimestamp == nil, fmt.Sprintf("data %v", cm.Data), nil
	}
}

// expectConfigMap checks, without waiting, that the ConfigMap has data.
func expectConfigMap(t *testing.T, ns, name string, data map[string]string) {
	t.Helper()
	expectConfigMapIn(t, suite.env.Client, "the hub", ns, name, data)
}

// expectConfigMapIn checks, without waiting, that the ConfigMap in cluster (read with c) has data.
func expectConfigMapIn(t *testing.T, c client.Client, cluster, ns, name string, data map[string]string) {
	t.Helper()
	var cm corev1.ConfigMap
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &cm); err != nil {
		t.Fatalf("ConfigMap %s/%s in %s: %v", ns, name, cluster, err)
	}
	if !maps.Equal(cm.Data, data) {
		t.Errorf("ConfigMap %s/%s in %s: data %v, want %v", ns, name, cluster, cm.Data, data)
	}
}

// waitGone waits until the object does not exist.
func waitGone(t *testing.T, obj client.Object, ns, name string) {
	t.Helper()
	waitFor(t, ns, fmt.Sprintf("%T %s/%s to be deleted", obj, ns, name),
		func(ctx context.Context) (bool, string, error) {
			err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
			if apierrors.IsNotFound(err) {
				return true, "", nil
			}
			if err != nil {
				return false, "", err
			}
			return false, fmt.Sprintf("exists, deletionTimestamp %v, finalizers %v", obj.GetDeletionTimestamp(), obj.GetFinalizers()), nil
		})
}

// expectGone checks, without waiting, that the object does not exist.
func expectGone(t *testing.T, obj client.Object, ns, name string) {
	t.Helper()
	err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, obj)
	if !apierrors.IsNotFound(err) {
		t.Errorf("%T %s/%s: want NotFound, got %v", obj, ns, name, err)
	}
}

func getExternalArtifact(t *testing.T, ns, name string) *sourcev1.ExternalArtifact {
	t.Helper()
	ea := &sourcev1.ExternalArtifact{}
	if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, ea); err != nil {
		t.Fatalf("ExternalArtifact %s/%s: %v", ns, name, err)
	}
	return ea
}

// expectSameArtifact checks that the ExternalArtifact publishes the KCLArtifact's artifact.
func expectSameArtifact(t *testing.T, ea *sourcev1.ExternalArtifact, want *meta.Artifact) {
	t.Helper()
	got := ea.Status.Artifact
	if got == nil {
		t.Fatalf("ExternalArtifact %s has no status.artifact", objectName(ea))
	}
	if got.URL != want.URL || got.Digest != want.Digest || got.Revision != want.Revision ||
		got.Metadata[originRevisionKey] != want.Metadata[originRevisionKey] {
		t.Errorf("ExternalArtifact %s: %s digest %s, want the KCLArtifact's %s digest %s",
			objectName(ea), artifactString(got), got.Digest, artifactString(want), want.Digest)
	}
}

func httpClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
}

// httpGet returns the status code and body of url (code 0 when there is no answer).
func httpGet(t *testing.T, url string) (int, []byte, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := httpClient().Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// expectArtifactServed downloads the artifact, checks its digest and returns the files of the
// tar.gz.
func expectArtifactServed(t *testing.T, a *meta.Artifact) map[string]string {
	t.Helper()
	code, body, err := httpGet(t, a.URL)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v", a.URL, code, err)
	}
	sum := sha256.Sum256(body)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != a.Digest {
		t.Errorf("GET %s: digest %s, want %s", a.URL, got, a.Digest)
	}
	files, err := untar(body)
	if err != nil {
		t.Fatalf("GET %s: %v", a.URL, err)
	}
	return files
}

func untar(tgz []byte) (map[string]string, error) {
	gz, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		files[hdr.Name] = string(b)
	}
}

// latestYAMLURL is the plain-YAML view of a KCLArtifact's current artifact.
func latestYAMLURL(ns, name string) string {
	return serverURL(ns, name, "latest.yaml")
}

// serverURL is the artifact server's URL of file (latest.yaml, diff) of the KCLArtifact ns/name,
// with the token its status.artifact.url carries: the server answers nothing without it.
func serverURL(ns, name, file string) string {
	u := fmt.Sprintf("%s/kclartifact/%s/%s/%s", kclController().ArtifactURL(), ns, name, file)
	obj := &kclv1.KCLArtifact{}
	if err := suite.env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); err == nil && obj.Status.Artifact != nil {
		u += "?" + artifactstore.TokenParam + "=" + artifactstore.TokenOf(obj.Status.Artifact.URL)
	}
	return u
}

// expectContainsAll checks that s contains every one of subs.
func expectContainsAll(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}

func inventoryNames(obj *kclv1.KCLArtifact) []string {
	var names []string
	for _, r := range obj.Status.Inventory {
		names = append(names, r.Kind+"/"+r.Namespace+"/"+r.Name)
	}
	slices.Sort(names)
	return names
}
