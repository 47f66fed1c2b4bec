package fluxenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestGitServer: repositories are served over the smart HTTP protocol and commits show up.
func TestGitServer(t *testing.T) {
	dir := t.TempDir()
	g, err := StartGitServer(filepath.Join(dir, "repos"), filepath.Join(dir, "work"), filepath.Join(dir, "git.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})

	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"a.yaml": "a: 1\n", "sub/b.yaml": "b: 2\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sha1, err := g.CreateRepo("demo", src)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.URL("demo"), "http://127.0.0.1:") {
		t.Fatalf("URL %s is not on 127.0.0.1", g.URL("demo"))
	}
	if got := lsRemote(t, g.URL("demo")); got != sha1 {
		t.Fatalf("ls-remote over HTTP: %q, want %q", got, sha1)
	}

	sha2, err := g.CommitFiles("demo", "change", map[string]string{"a.yaml": "a: 2\n"}, "sub/b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if sha2 == sha1 {
		t.Fatal("a commit returned the previous SHA")
	}
	if got := lsRemote(t, g.URL("demo")); got != sha2 {
		t.Fatalf("ls-remote after commit: %q, want %q", got, sha2)
	}
	if head, err := g.Head("demo"); err != nil || head != sha2 {
		t.Fatalf("Head: %q, %v; want %q", head, err, sha2)
	}

	// a clone over HTTP sees the change
	clone := filepath.Join(t.TempDir(), "clone")
	if out, err := exec.Command("git", "clone", "--quiet", g.URL("demo"), clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v: %s", err, out)
	}
	if data, err := os.ReadFile(filepath.Join(clone, "a.yaml")); err != nil || string(data) != "a: 2\n" {
		t.Fatalf("a.yaml in clone: %q, %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(clone, "sub", "b.yaml")); !os.IsNotExist(err) {
		t.Fatalf("sub/b.yaml should be removed: %v", err)
	}

	if _, err := g.CreateRepo("../evil", src); err == nil {
		t.Fatal("CreateRepo accepted a name with a path")
	}
	if _, err := g.CommitFiles("demo", "escape", map[string]string{"../x": ""}); err == nil {
		t.Fatal("CommitFiles wrote outside the repository")
	}
}

func lsRemote(t *testing.T, url string) string {
	t.Helper()
	out, err := exec.Command("git", "ls-remote", url, "refs/heads/"+DefaultBranch).CombinedOutput()
	if err != nil {
		t.Fatalf("git ls-remote %s: %v: %s", url, err, out)
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		t.Fatalf("git ls-remote %s: no %s branch", url, DefaultBranch)
	}
	return f[0]
}

// TestStartNamesFailingController: a controller that cannot start makes Start fail with its
// name and log tail, and nothing Start started is left running.
func TestStartNamesFailingController(t *testing.T) {
	tb, err := LoadTestBin()
	if err != nil {
		t.Fatal(err)
	}
	before := len(childrenRunning(os.Getpid(), tb.Etcd)) + len(childrenRunning(os.Getpid(), tb.KubeAPIServer))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, err := Start(ctx, Options{
		WorkDir:                 t.TempDir(),
		TestBin:                 tb,
		KustomizeControllerArgs: []string{"--no-such-flag"},
		Logf:                    t.Logf,
	})
	if err == nil {
		_ = env.Stop()
		t.Fatal("Start succeeded with a bad kustomize-controller flag")
	}
	msg := err.Error()
	t.Logf("Start failed as expected: %v", err)
	for _, want := range []string{"kustomize-controller exited before becoming ready", "no-such-flag"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "source-controller exited") || strings.Contains(msg, "source-controller not ready") {
		t.Errorf("error blames source-controller:\n%s", msg)
	}
	for _, exe := range []string{tb.SourceController, tb.KustomizeController} {
		if pids := childrenRunning(os.Getpid(), exe); len(pids) > 0 {
			t.Errorf("%s still running after a failed Start: %v", exe, pids)
		}
	}
	after := len(childrenRunning(os.Getpid(), tb.Etcd)) + len(childrenRunning(os.Getpid(), tb.KubeAPIServer))
	if after != before {
		t.Errorf("etcd/kube-apiserver children: %d before Start, %d after the failed Start", before, after)
	}
}

// TestRestartControlPlane: kube-apiserver, then etcd, stopped and started again keep the stored
// objects, the address and the credentials; Processes names the new processes.
func TestRestartControlPlane(t *testing.T) {
	tb, err := LoadTestBin()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, err := Start(ctx, Options{WorkDir: t.TempDir(), TestBin: tb, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	for _, restart := range []struct {
		name string
		do   func() error
	}{{"kube-apiserver", env.RestartAPIServer}, {"etcd", env.RestartEtcd}} {
		before := pidOf(env, restart.name)
		if err := restart.do(); err != nil {
			t.Fatal(err)
		}
		if after := pidOf(env, restart.name); after == 0 || after == before {
			t.Errorf("%s: pid %d before the restart, %d after; want a new process", restart.name, before, after)
		}
		if err := WaitFor(ctx, time.Minute, "the ConfigMap after restarting "+restart.name, func(ctx context.Context) (bool, string, error) {
			var got corev1.ConfigMap
			if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), &got); err != nil {
				return false, "", err
			}
			return got.Data["k"] == "v", fmt.Sprintf("data %v", got.Data), nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func pidOf(env *Env, name string) int {
	for _, p := range env.Processes() {
		if p.Name == name && p.Alive() {
			return p.PID
		}
	}
	return 0
}
