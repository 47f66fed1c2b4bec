package rendercmd

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// render --kclartifact without --diff: what `flux kcl build kclartifact` prints.

// publishedProgram renders a pre-phase ConfigMap after the main objects, and prints a line.
const publishedProgram = `_greeting = option("greeting") or "hi"
_replicas = str(option("replicas") or 1)
_password = option("password") or "none"
print("rendering")
items = [
    {apiVersion = "v1", kind = "ConfigMap", metadata = {name = "app-config", namespace = "apps"}, data = {greeting = _greeting, replicas = _replicas}}
    {apiVersion = "v1", kind = "Secret", metadata = {name = "app-creds", namespace = "apps"}, stringData.password = _password}
    {apiVersion = "v1", kind = "ConfigMap", metadata = {name = "app-pre", namespace = "apps", annotations = {"kcl.contrib.fluxcd.io/phase" = "pre"}}}
]
`

const publishedKCLArtifact = `apiVersion: kcl.contrib.fluxcd.io/v1alpha1
kind: KCLArtifact
metadata: {name: app}
spec:
  interval: 5m
  sourceRef: {kind: GitRepository, name: repo}
  path: ./deploy
  arguments: {replicas: "2"}
`

// published is what publishedProgram's KCLArtifact publishes with these arguments: the pre
// phase, then main, as the artifact's pre/ and main/manifests.yaml hold them.
func published(greeting, replicas, password string) string {
	return `apiVersion: v1
kind: ConfigMap
metadata:
  annotations:
    kcl.contrib.fluxcd.io/phase: pre
  name: app-pre
  namespace: apps
---
` + publishedMain(greeting, replicas, password)
}

func publishedMain(greeting, replicas, password string) string {
	return `apiVersion: v1
data:
  greeting: ` + greeting + `
  replicas: "` + replicas + `"
kind: ConfigMap
metadata:
  name: app-config
  namespace: apps
---
apiVersion: v1
kind: Secret
metadata:
  name: app-creds
  namespace: apps
stringData:
  password: ` + password + `
`
}

func TestKCLArtifactFilePrintsWhatItPublishes(t *testing.T) {
	dir := files(t, map[string]string{"deploy/main.k": publishedProgram, "clusters/app.yaml": publishedKCLArtifact})
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"spec":                  {[]string{"--kclartifact-file", "clusters/app.yaml"}, published("hi", "2", "none")},
		"-D over the spec":      {[]string{"--kclartifact-file", "clusters/app.yaml", "-D", "replicas=3", "-D", "greeting=hey"}, published("hey", "3", "none")},
		"named, in a namespace": {[]string{"--kclartifact-file", "clusters/app.yaml", "--kclartifact", "apps/app"}, published("hi", "2", "none")},
		"one phase":             {[]string{"--kclartifact-file", "clusters/app.yaml", "--phase", "main"}, publishedMain("hi", "2", "none")},
		"source elsewhere":      {[]string{"--kclartifact-file", filepath.Join(dir, "clusters/app.yaml"), dir}, published("hi", "2", "none")},
	} {
		t.Run(name, func(t *testing.T) {
			wd := dir
			if name == "source elsewhere" {
				wd = t.TempDir()
			}
			out, errOut, code := runRender(t, wd, tc.args...)
			// print() goes to stderr: stdout is what the artifact holds, nothing else
			if code != 0 || out != tc.want || errOut != "rendering\n" {
				t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr %q", code, out, tc.want, errOut)
			}
		})
	}
	for name, tc := range map[string]struct {
		args []string
		code int
		err  string
	}{
		"a spec flag":    {[]string{"--kclartifact-file", "clusters/app.yaml", "-O", "x=1"}, 2, "--overrides cannot be used with --kclartifact"},
		"two sources":    {[]string{"--kclartifact-file", "clusters/app.yaml", ".", "deploy"}, 2, "the only argument is the directory"},
		"no such file":   {[]string{"--kclartifact-file", "clusters/none.yaml"}, 1, "--kclartifact-file clusters/none.yaml does not exist"},
		"another name":   {[]string{"--kclartifact-file", "clusters/app.yaml", "--kclartifact", "other"}, 1, "clusters/app.yaml has no KCLArtifact other"},
		"path not a dir": {[]string{"--kclartifact-file", "clusters/app.yaml", "clusters"}, 1, `spec.path "./deploy" is not a directory`},
		"bad phase":      {[]string{"--kclartifact-file", "clusters/app.yaml", "--phase", "later"}, 2, `"later" is not pre, main or post`},
		"argumentsFrom, no cluster": {[]string{"--kclartifact-file", "clusters/from.yaml", "--kubeconfig", deadKubeconfig(t)}, 1,
			"KCLArtifact app has argumentsFrom: cannot reach the cluster at https://127.0.0.1:1"},
	} {
		t.Run(name, func(t *testing.T) {
			write(t, filepath.Join(dir, "clusters", "from.yaml"), publishedKCLArtifact+"  argumentsFrom: [{kind: ConfigMap, name: settings}]\n")
			out, errOut, code := runRender(t, dir, tc.args...)
			if code != tc.code || out != "" || !strings.Contains(errOut, tc.err) {
				t.Fatalf("exit %d (want %d), stdout %q, stderr %q (want %q)", code, tc.code, out, errOut, tc.err)
			}
		})
	}
}

// deadKubeconfig points at 127.0.0.1:1, where nothing listens.
func deadKubeconfig(t *testing.T) string {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["dead"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.AuthInfos["dead"] = &clientcmdapi.AuthInfo{Token: "x"}
	cfg.Contexts["dead"] = &clientcmdapi.Context{Cluster: "dead", AuthInfo: "dead"}
	cfg.CurrentContext = "dead"
	return writeConfig(t, cfg)
}

// The KCLArtifact of the cluster: its arguments and argumentsFrom (ConfigMap and Secret) read
// with the kubeconfig; an unknown one is one line, exit 1.
func TestKCLArtifactFromTheClusterPrintsWhatItPublishes(t *testing.T) {
	tb, err := fluxenv.LoadTestBin()
	if err != nil {
		t.Fatal(err)
	}
	cfg, kc := fluxenv.StartAPIServer(t, tb, "render-kclartifact")
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{filepath.Join("..", "..", "config", "crd", "bases")}}); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = kclv1.AddToScheme(scheme)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	meta := func(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name, Namespace: "apps"} }
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}},
		&corev1.ConfigMap{ObjectMeta: meta("settings"), Data: map[string]string{"greeting": "from-configmap"}},
		&corev1.Secret{ObjectMeta: meta("creds"), StringData: map[string]string{"password": "from-secret"}},
		&kclv1.KCLArtifact{ObjectMeta: meta("app"), Spec: kclv1.KCLArtifactSpec{
			SourceRef: kclv1.SourceReference{Kind: "GitRepository", Name: "repo"}, Interval: metav1.Duration{Duration: time.Minute},
			Path: "./deploy", Arguments: map[string]string{"replicas": "4"},
			ArgumentsFrom: []kclv1.ArgumentsReference{{Kind: "ConfigMap", Name: "settings"}, {Kind: "Secret", Name: "creds"}}}},
	} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	write(t, kubeconfig, string(kc))
	dir := files(t, map[string]string{"deploy/main.k": publishedProgram})

	out, errOut, code := runRender(t, dir, "--kclartifact", "apps/app", "--kubeconfig", kubeconfig)
	if want := published("from-configmap", "4", "from-secret"); code != 0 || out != want {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr %q", code, out, want, errOut)
	}
	out, errOut, code = runRender(t, dir, "--kclartifact", "apps/nope", "--kubeconfig", kubeconfig)
	if code != 1 || out != "" || errOut != "KCLArtifact apps/nope not found\n" {
		t.Fatalf("unknown KCLArtifact: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// a manifest file's argumentsFrom are the cluster's, in the namespace --kclartifact names
	write(t, filepath.Join(dir, "app.yaml"), publishedKCLArtifact+"  argumentsFrom: [{kind: ConfigMap, name: settings}]\n")
	out, errOut, code = runRender(t, dir, "--kclartifact-file", "app.yaml", "--kclartifact", "apps/app", "--kubeconfig", kubeconfig)
	if want := published("from-configmap", "2", "none"); code != 0 || out != want {
		t.Fatalf("file with argumentsFrom: exit %d\nstdout:\n%s\nwant:\n%s\nstderr %q", code, out, want, errOut)
	}
}

// A KCLArtifact's source is a checkout under review, as with the diffs: confined by default, and
// every hostile read of review_test fails the render (exit 1) with nothing of it printed.
// Watched first with review set for the diff modes only: the reads of .git succeeded and
// printed the token.
func TestKCLArtifactRenderReadsNoMetadataNorOutside(t *testing.T) {
	c := newReviewCheckouts(t)
	t.Setenv("KCL_REVIEW_SECRET", "SECRET-FROM-THE-ENVIRONMENT")
	for name, expr := range hostileReads(c) {
		dir := c.head
		if strings.HasPrefix(name, "worktree") {
			dir = c.worktree
		}
		write(t, filepath.Join(dir, "main.k"), leak(expr))
		for _, mode := range [][]string{{"--kclartifact-file", "kclartifact.yaml"},
			{"--kclartifact-file", "kclartifact.yaml", "--sandbox"}} {
			out, errOut, code := runRender(t, dir, mode...)
			expectRefusedRead(t, name, mode, out, errOut, code, 1)
		}
	}
	write(t, filepath.Join(c.head, "main.k"), leak(`file.read_env("KCL_REVIEW_SECRET")`))
	out, errOut, code := runRender(t, c.head, "--kclartifact-file", "kclartifact.yaml")
	if code != 0 || strings.Contains(out+errOut, "SECRET-FROM") {
		t.Errorf("file.read_env: exit %d, reached the environment? %s %s", code, out, errOut)
	}
}
