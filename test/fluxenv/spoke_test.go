package fluxenv

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestSpoke: a spoke serves on https://127.0.0.1, its kubeconfig (credentials inline, as a
// Secret carries it) reaches it, the Secret is written and rewritten under key "value", and
// Stop leaves nothing running.
func TestSpoke(t *testing.T) {
	tb, err := LoadTestBin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := StartSpoke(SpokeOptions{Name: "Bad_Name", TestBin: tb}); err == nil {
		t.Fatal("StartSpoke accepted the name Bad_Name")
	}
	dir := t.TempDir()
	s, err := StartSpoke(SpokeOptions{Name: "production", Dir: dir, LogDir: dir, TestBin: tb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	if len(s.Processes()) != 2 {
		t.Fatalf("processes %v, want etcd and kube-apiserver", s.Processes())
	}

	kc, err := clientcmd.Load(s.KubeConfig)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range kc.Clusters {
		if want := "https://127.0.0.1:"; !strings.HasPrefix(c.Server, want) || c.CertificateAuthority != "" || len(c.CertificateAuthorityData) == 0 {
			t.Errorf("cluster %s: server %q, CA file %q; want %s<port> and the CA inline", name, c.Server, c.CertificateAuthority, want)
		}
	}
	for name, u := range kc.AuthInfos {
		if u.ClientCertificate != "" || u.ClientKey != "" || len(u.ClientCertificateData) == 0 {
			t.Errorf("user %s: certificate files %q %q; want the certificate inline", name, u.ClientCertificate, u.ClientKey)
		}
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.KubeConfig)
	if err != nil {
		t.Fatal(err)
	}
	viaKubeconfig, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "written", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if err := viaKubeconfig.Create(ctx, cm); err != nil {
		t.Fatalf("creating a ConfigMap with the kubeconfig: %v", err)
	}
	if err := s.Client.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); err != nil {
		t.Fatalf("reading it with Spoke.Client: %v", err)
	}

	// the Secret goes to the hub; the spoke itself stands in for it here
	for range 2 {
		if err := s.WriteKubeConfigSecret(ctx, s.Client, "default", "spoke-kubeconfig"); err != nil {
			t.Fatal(err)
		}
	}
	var secret corev1.Secret
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "spoke-kubeconfig"}, &secret); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(secret.Data[KubeConfigSecretKey], s.KubeConfig) || len(secret.Data) != 1 {
		t.Errorf("Secret keys %v, want only %q holding the kubeconfig", keys(secret.Data), KubeConfigSecretKey)
	}

	procs := s.Processes()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.Alive() {
			t.Errorf("%s (pid %d) still running after Stop", p.Name, p.PID)
		}
	}
	if err := s.Stop(); err != nil {
		t.Errorf("a second Stop: %v", err)
	}
}

// TestSpokeWithFlux: a spoke with its own Flux serves the Flux CRDs, runs source-controller and
// kustomize-controller (ready when StartSpoke returns) against its kubeconfig file, with their
// logs under the spoke's name, and Stop stops them with the control plane.
func TestSpokeWithFlux(t *testing.T) {
	tb, err := LoadTestBin()
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, sourcev1.AddToScheme, kustomizev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	s, err := StartSpoke(SpokeOptions{Name: "edge", Dir: dir, LogDir: dir, TestBin: tb, Scheme: scheme, Flux: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	procs := s.Processes()
	if len(procs) != 4 {
		t.Fatalf("processes %v, want etcd, kube-apiserver, source-controller and kustomize-controller", procs)
	}
	for _, name := range []string{"source-controller", "kustomize-controller"} {
		if _, err := os.Stat(filepath.Join(dir, "spoke-edge-"+name+".log")); err != nil {
			t.Errorf("log of %s: %v", name, err)
		}
	}
	kc, err := os.ReadFile(s.KubeconfigPath)
	if err != nil || !bytes.Equal(kc, s.KubeConfig) {
		t.Errorf("kubeconfig file %s: %v; want Spoke.KubeConfig", s.KubeconfigPath, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, list := range []client.ObjectList{&sourcev1.OCIRepositoryList{}, &kustomizev1.KustomizationList{}} {
		if err := s.Client.List(ctx, list); err != nil {
			t.Errorf("listing %T in the spoke (are the Flux CRDs installed?): %v", list, err)
		}
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.Alive() {
			t.Errorf("%s (pid %d) still running after Stop", p.Name, p.PID)
		}
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
