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
	"github.com/kcl-flux/kcl-artifact-controller/test/kclapp"
)

// render --kclartifact without --diff: what `flux kcl build kclartifact` prints. The application
// is test/kclapp's, which test/fluxplugin builds through flux to the same output.

// unnamespaced is kclapp's manifest without its namespace: the one --kclartifact names then.
func unnamespaced(t *testing.T) string {
	s := strings.Replace(kclapp.KCLArtifact, "metadata: {name: app, namespace: apps}", "metadata: {name: app}", 1)
	if s == kclapp.KCLArtifact {
		t.Fatal("kclapp's KCLArtifact has no metadata.namespace to take out")
	}
	return s
}

func TestKCLArtifactFilePrintsWhatItPublishes(t *testing.T) {
	dir := files(t, map[string]string{kclapp.ProgramPath: kclapp.Program, kclapp.KCLArtifactPath: unnamespaced(t)})
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"spec":                  {[]string{"--kclartifact-file", "clusters/app.yaml"}, kclapp.Published("hi", "3", "none")},
		"-D over the spec":      {[]string{"--kclartifact-file", "clusters/app.yaml", "-D", "replicas=4", "-D", "greeting=hey"}, kclapp.Published("hey", "4", "none")},
		"named, in a namespace": {[]string{"--kclartifact-file", "clusters/app.yaml", "--kclartifact", "apps/app"}, kclapp.Published("hi", "3", "none")},
		"one phase":             {[]string{"--kclartifact-file", "clusters/app.yaml", "--phase", "main"}, kclapp.Main("hi", "3", "none")},
		"source elsewhere":      {[]string{"--kclartifact-file", filepath.Join(dir, "clusters/app.yaml"), dir}, kclapp.Published("hi", "3", "none")},
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
			write(t, filepath.Join(dir, "clusters", "from.yaml"), unnamespaced(t)+"  argumentsFrom: [{kind: ConfigMap, name: settings}]\n")
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
	dir := files(t, map[string]string{kclapp.ProgramPath: kclapp.Program})

	out, errOut, code := runRender(t, dir, "--kclartifact", "apps/app", "--kubeconfig", kubeconfig)
	if want := kclapp.Published("from-configmap", "4", "from-secret"); code != 0 || out != want {
		t.Fatalf("exit %d\nstdout:\n%s\nwant:\n%s\nstderr %q", code, out, want, errOut)
	}
	out, errOut, code = runRender(t, dir, "--kclartifact", "apps/nope", "--kubeconfig", kubeconfig)
	if code != 1 || out != "" || errOut != "KCLArtifact apps/nope not found\n" {
		t.Fatalf("unknown KCLArtifact: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// a manifest file's argumentsFrom are the cluster's, in the namespace --kclartifact names
	write(t, filepath.Join(dir, "app.yaml"), unnamespaced(t)+"  argumentsFrom: [{kind: ConfigMap, name: settings}]\n")
	out, errOut, code = runRender(t, dir, "--kclartifact-file", "app.yaml", "--kclartifact", "apps/app", "--kubeconfig", kubeconfig)
	if want := kclapp.Published("from-configmap", "3", "none"); code != 0 || out != want {
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
	eachHostileRead(t, c, func(name, dir string) {
		for _, mode := range [][]string{{"--kclartifact-file", "kclartifact.yaml"},
			{"--kclartifact-file", "kclartifact.yaml", "--sandbox"}} {
			out, errOut, code := runRender(t, dir, mode...)
			expectRefusedRead(t, name, mode, out, errOut, code, 1)
		}
	})
	write(t, filepath.Join(c.head, "main.k"), leak(`file.read_env("KCL_REVIEW_SECRET")`))
	out, errOut, code := runRender(t, c.head, "--kclartifact-file", "kclartifact.yaml")
	if code != 0 || strings.Contains(out+errOut, "SECRET-FROM") {
		t.Errorf("file.read_env: exit %d, reached the environment? %s %s", code, out, errOut)
	}
}
