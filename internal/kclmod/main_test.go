package kclmod_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
)

// The test binary doubles as the KCL worker for TestResolvedPackagesRender: the engine only
// ever runs in worker processes.
func TestMain(m *testing.M) {
	kclworker.ServeIfWorker()
	os.Exit(m.Run())
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// loopback lets a Resolver reach the test servers on 127.0.0.1.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// newResolver returns a Resolver that may reach 127.0.0.0/8 unless o names its own
// AllowedNetworks; strictResolver, one with the default network rules.
func newResolver(t *testing.T, o kclmod.Options) *kclmod.Resolver {
	t.Helper()
	if o.AllowedNetworks == nil {
		o.AllowedNetworks = loopback
	}
	return strictResolver(t, o)
}

func strictResolver(t *testing.T, o kclmod.Options) *kclmod.Resolver {
	t.Helper()
	if o.CacheDir == "" {
		o.CacheDir = t.TempDir()
	}
	r, err := kclmod.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func resolve(t *testing.T, r *kclmod.Resolver, dir string, creds kclmod.Credentials) *kclmod.Result {
	t.Helper()
	res, err := r.Resolve(ctx(t), dir, dir, creds)
	if err != nil {
		t.Fatalf("resolve: %v", err)
	}
	t.Cleanup(res.Release)
	return res
}

func pkgByName(t *testing.T, res *kclmod.Result, name string) kclmod.Package {
	t.Helper()
	for _, p := range res.Packages {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no package %q in %+v", name, res.Packages)
	return kclmod.Package{}
}

func mustContain(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error containing %q, got none", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err, p)
		}
	}
}

func mustNotContain(t *testing.T, err error, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if err != nil && strings.Contains(err.Error(), s) {
			t.Fatalf("error %q reveals a credential", err)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// k8sPackage writes a small k8s-style schema package.
func k8sPackage(t *testing.T, version string) string {
	return kclmodtest.WritePackage(t, t.TempDir(), "k8s", version, nil, map[string]string{
		"api/core/v1/config_map.k": `schema ConfigMap:
    apiVersion: "v1" = "v1"
    kind: "ConfigMap" = "ConfigMap"
    metadata: {str:}
    data?: {str:str}
`,
		"README.md": "k8s " + version + "\n",
	})
}

func push(t *testing.T, reg *kclmodtest.Registry, ref, dir string, o kclmodtest.PushOptions) kclmodtest.Pushed {
	t.Helper()
	p, err := reg.PushPackage(ctx(t), reg.Host+"/"+ref, dir, o)
	if err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return p
}

func writeLock(t *testing.T, dir, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, kclmod.LockFileName), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
