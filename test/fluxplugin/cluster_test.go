package fluxplugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// startCluster starts kube-apiserver and etcd (envtest, bin/testbin.env) and returns a client
// and an admin kubeconfig file. Without the binaries the test skips, except under CI=true.
func startCluster(t *testing.T) (*kubernetes.Clientset, string) {
	t.Helper()
	cfg, kc := startClusterConfig(t)
	return kubernetes.NewForConfigOrDie(cfg), kc
}

// startClusterConfig is startCluster with the admin rest.Config.
func startClusterConfig(t *testing.T) (*rest.Config, string) {
	t.Helper()
	tb, err := fluxenv.LoadTestBin()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("SKIP: %v", err)
	}
	cfg, kc := fluxenv.StartAPIServer(t, tb, "flux-kcl")
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, path
}

// controllerDeployment is the shape of config/manager's Deployment that `version` reads.
func controllerDeployment(image string) *appsv1.Deployment {
	labels := map[string]string{"app.kubernetes.io/name": "kcl-artifact-controller"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "kcl-artifact-controller", Namespace: "kcl-system", Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "manager", Image: image}}},
			},
		},
	}
}

func TestVersionReadsTheControllerDeployment(t *testing.T) {
	fluxBinary(t)
	cs, kc := startCluster(t)
	ctx := context.Background()

	r := flux(t, kc, "kcl", "version")
	if r.code != 1 || !strings.Contains(r.stdout, "kcl-artifact-controller: unknown\n") ||
		!strings.HasPrefix(r.stderr, "✗ no Deployment with the label app.kubernetes.io/name=kcl-artifact-controller") {
		t.Errorf("without the controller installed: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kcl-system"}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	image := "ghcr.io/kcl-flux/kcl-artifact-controller:v9.8.7@sha256:" + strings.Repeat("0", 64)
	if _, err := cs.AppsV1().Deployments("kcl-system").Create(ctx, controllerDeployment(image), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r = flux(t, kc, "kcl", "version")
	want := "flux-kcl: " + pluginVersion + "\nkcl-artifact-controller: v9.8.7\nkcl-engine: none (build and diff kclartifact run kcl-artifact-controller, not found)\n"
	if r.code != 0 || r.stdout != want || r.stderr != "" {
		t.Errorf("with the controller installed: exit %d, stdout %q, stderr %q; want exit 0, stdout %q", r.code, r.stdout, r.stderr, want)
	}
}

// installCRDs installs this project's CRDs in the cluster of cfg.
func installCRDs(t *testing.T, cfg *rest.Config, more ...string) {
	t.Helper()
	paths := append([]string{filepath.Join(repoRoot(), "config", "crd", "bases")}, more...)
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: paths}); err != nil {
		t.Fatal(err)
	}
}
