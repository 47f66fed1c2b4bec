package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	kustomizev1 "github.com/fluxcd/kustomize-controller/api/v1"
	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// leaseDuration is the lease of the two-replica test: short, so that a killed leader is
// replaced in seconds rather than Flux's default 35 s.
const leaseDuration = 6 * time.Second

// TestTwoReplicas: two replicas with leader election and their own (empty) storage. Only the
// leader reconciles, serves artifacts and is ready on /readyz, so that a Service sends
// kustomize-controller to it alone. Killed with SIGKILL (no lease release), the leader is
// replaced after its lease runs out, and the new leader serves every artifact again. A stand-in
// for the Service (a reverse proxy following /readyz) is in front of them: there is no
// kube-proxy here, and without one address for both, kustomize-controller would retry
// downloads from the dead leader for minutes.
func TestTwoReplicas(t *testing.T) {
	t.Parallel()
	const shard = "replicas"
	svc := startService(t)
	// The replicas share the key of the URLs' tokens, as replicas given it from one Secret do:
	// the URLs the leader published open the new leader's artifacts once it stored them again.
	keyFile := filepath.Join(t.TempDir(), "url-key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("replicas-share-this-url-key.", 2)), 0o600); err != nil {
		t.Fatal(err)
	}
	start := func(name string, standby bool) *fluxenv.KCLController {
		t.Helper()
		c, err := suite.env.StartKCLController(t.Context(), fluxenv.KCLControllerOptions{
			Binary: suite.binary, Name: controllerName + "-" + name, ServiceAccount: suite.install.serviceAccount(),
			Standby: standby,
			Args: []string{"--enable-leader-election", "--watch-label-selector=" + shardKey + "=" + shard,
				"--storage-adv-addr=" + svc.addr, "--storage-url-key-file=" + keyFile,
				"--leader-election-lease-duration=" + leaseDuration.String(),
				"--leader-election-renew-deadline=4s", "--leader-election-retry-period=1s"},
		})
		if err != nil {
			t.Fatalf("starting replica %s: %v", name, err)
		}
		t.Cleanup(func() { _ = suite.env.StopKCLController(c) })
		return c
	}
	leader := start("replica-a", false)
	standby := start("replica-b", true)
	svc.route(leader, standby)
	expectReady(t, "the leader's /readyz", leader.ReadyURL)
	expectNotReady(t, "the standby's /readyz", standby.ReadyURL)
	expectRefused(t, "the standby's artifact server", standby.ArtifactURL())

	ns := newNamespace(t, "replicas")
	rev, names := createShardApps(t, ns, shard, program{version: "1"}.files())
	for _, name := range names {
		obj := waitKCLArtifactReady(t, ns, name, rev)
		if !strings.HasPrefix(obj.Status.Artifact.URL, svc.url()+"/") {
			t.Fatalf("KCLArtifact %s: artifact %s, not at the Service %s", name, obj.Status.Artifact.URL, svc.url())
		}
		expectArtifactServed(t, artifactAt(obj.Status.Artifact, leader.ArtifactURL()))
		waitKustomizationApplied(t, ns, name, obj.Status.Artifact.Revision)
	}
	if lines := grepLines(standby.LogPath, `"namespace": "`+ns+`"`); len(lines) > 0 {
		t.Errorf("the standby reconciled:\n%s", strings.Join(lines, "\n"))
	}

	killed := time.Now()
	if err := syscall.Kill(-leader.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-leader.Done()
	waitFor(t, ns, "the standby to become ready", func(ctx context.Context) (bool, string, error) {
		code, err := status(ctx, standby.ReadyURL)
		return code == http.StatusOK, fmt.Sprintf("/readyz %d %v", code, err), nil
	})
	t.Logf("leader killed -> standby ready in %s (lease %s)", time.Since(killed).Round(100*time.Millisecond), leaseDuration)
	for _, name := range names {
		var ea sourcev1.ExternalArtifact
		if err := suite.env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &ea); err != nil {
			t.Fatal(err)
		}
		a := ea.Status.Artifact
		// the new leader's storage was empty: it must have rendered and stored it again
		waitFor(t, ns, "artifact "+name+" served by the new leader", func(ctx context.Context) (bool, string, error) {
			code, err := status(ctx, artifactAt(a, standby.ArtifactURL()).URL)
			return code == http.StatusOK, fmt.Sprintf("GET %d %v", code, err), nil
		})
		expectArtifactServed(t, artifactAt(a, standby.ArtifactURL()))
		expectArtifactServed(t, a) // through the Service, at the URL kustomize-controller has
		// kustomize-controller downloads it again, through the Service, from the new leader
		ks := requestKustomizationReconcile(t, ns, name)
		if c := apimeta.FindStatusCondition(ks.Status.Conditions, "Ready"); c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("Kustomization %s after the failover: %s", name, kustomizationState(ks))
		}
	}
	t.Logf("leader killed -> every artifact served again by the new leader in %s", time.Since(killed).Round(100*time.Millisecond))
	// deleted while the new leader runs: its finalizer needs it
	deleteKCLArtifacts(t, ns, names...)
}

// createShardApps creates a repository of files, its GitRepository and three KCLArtifacts of it
// labelled for a shard; it returns the revision and their names.
func createShardApps(t *testing.T, ns, shard string, files map[string]string) (string, []string) {
	t.Helper()
	rev := gitRevision(createRepo(t, ns, files))
	createGitRepository(t, ns, "app", ns)
	names := []string{"one", "two", "three"}
	for _, name := range names {
		obj := newKCLArtifact(ns, name, "app", map[string]string{"name": name})
		obj.Labels = map[string]string{shardKey: shard}
		create(t, obj)
	}
	return rev, names
}

// deleteKCLArtifacts deletes KCLArtifacts and waits until they and their Kustomizations are
// gone: kustomize-controller retrying a download from a stopped instance would be slow to stop.
func deleteKCLArtifacts(t *testing.T, ns string, names ...string) {
	t.Helper()
	for _, name := range names {
		obj := &kclv1.KCLArtifact{}
		obj.Namespace, obj.Name = ns, name
		if err := suite.env.Client.Delete(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
		waitGone(t, &kclv1.KCLArtifact{}, ns, name)
		waitGone(t, &kustomizev1.Kustomization{}, ns, name)
	}
}

// service stands for the Kubernetes Service in front of the replicas: both advertise its address,
// and it forwards each request to a replica whose /readyz answers 200, as a Service's endpoints
// follow readiness, or answers 503 when none is ready.
type service struct {
	addr     string
	mu       sync.Mutex
	replicas []*fluxenv.KCLController
}

func startService(t *testing.T) *service {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &service{addr: ln.Addr().String()}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

func (s *service) url() string { return "http://" + s.addr }

func (s *service) route(replicas ...*fluxenv.KCLController) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replicas = replicas
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	replicas := s.replicas
	s.mu.Unlock()
	for _, c := range replicas {
		if code, err := status(r.Context(), c.ReadyURL); err == nil && code == http.StatusOK {
			target, _ := url.Parse(c.ArtifactURL())
			httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
			return
		}
	}
	http.Error(w, "no ready endpoint", http.StatusServiceUnavailable)
}

// artifactAt is the artifact at another server's address.
func artifactAt(a *meta.Artifact, base string) *meta.Artifact {
	b := a.DeepCopy()
	u, _ := url.Parse(a.URL)
	b.URL = base + u.RequestURI() // the path and the token
	return b
}

func status(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := httpClient().Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// expectNotReady fails unless url answers, with a status other than 200.
func expectNotReady(t *testing.T, what, url string) {
	t.Helper()
	code, err := status(t.Context(), url)
	if err != nil || code == http.StatusOK {
		t.Errorf("%s (%s): %d %v, want an answer other than 200", what, url, code, err)
	}
}

func expectReady(t *testing.T, what, url string) {
	t.Helper()
	if code, err := status(t.Context(), url); err != nil || code != http.StatusOK {
		t.Errorf("%s (%s): %d %v, want 200", what, url, code, err)
	}
}

// expectRefused fails unless nothing listens at url.
func expectRefused(t *testing.T, what, url string) {
	t.Helper()
	if code, err := status(t.Context(), url); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("%s (%s): %d %v, want the connection refused", what, url, code, err)
	}
}
