package rendercmd

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/normalize"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kcl-flux/kcl-artifact-controller/internal/fluxbuild"
	"github.com/kcl-flux/kcl-artifact-controller/internal/manifests"
	"github.com/kcl-flux/kcl-artifact-controller/test/fluxenv"
)

// diffProgram renders a Namespace (cluster-scoped) and, in it, a ConfigMap and a Secret that have
// no namespace of their own: render --diff must give them one.
const diffProgram = `ns = option("ns")
replicas = option("replicas") or 1
password = option("password") or "s3cr3t-one"
items = [
    {apiVersion = "v1", kind = "Namespace", metadata.name = ns}
    {apiVersion = "v1", kind = "ConfigMap", metadata.name = "app", data.replicas = str(replicas)}
    {apiVersion = "v1", kind = "Secret", metadata.name = "creds", stringData.password = password}
]
`

// testCluster is a kube-apiserver started by envtest, with a kubeconfig for its admin user.
type testCluster struct {
	client     client.Client
	kubeconfig []byte
}

func startCluster(t *testing.T) *testCluster {
	t.Helper()
	tb, err := fluxenv.LoadTestBin()
	if err != nil {
		t.Fatal(err)
	}
	cfg, kc := fluxenv.StartAPIServer(t, tb, "render-diff")
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &testCluster{client: c, kubeconfig: kc}
}

// writeKubeconfig writes the cluster's kubeconfig into a temporary directory, with ns as the
// namespace of its context ("" for none).
func (tc *testCluster) writeKubeconfig(t *testing.T, ns string) string {
	t.Helper()
	cfg, err := clientcmd.Load(tc.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Contexts[cfg.CurrentContext].Namespace = ns
	return writeConfig(t, cfg)
}

func writeConfig(t *testing.T, cfg *clientcmdapi.Config) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// apply renders the program with args and applies its objects as kustomize-controller does:
// normalized, namespaces first, by server-side apply as field manager kustomize-controller.
func (tc *testCluster) apply(t *testing.T, dir, ns string, args ...string) {
	t.Helper()
	out, errOut, code := runRender(t, dir, append([]string{"main.k", "-D", "ns=" + ns}, args...)...)
	if code != 0 {
		t.Fatalf("render: code %d err %q", code, errOut)
	}
	objs, err := manifests.Parse([]byte(out), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() != "Namespace" {
			o.SetNamespace(ns)
		}
	}
	if err := normalize.UnstructuredList(objs); err != nil {
		t.Fatal(err)
	}
	sort.Sort(ssa.SortableUnstructureds(objs))
	mgr := ssa.NewResourceManager(tc.client, nil, ssa.Owner{Field: "kustomize-controller", Group: fluxbuild.OwnerGroup})
	for _, o := range objs {
		if _, err := mgr.Apply(context.Background(), o, ssa.DefaultApplyOptions()); err != nil {
			t.Fatal(err)
		}
	}
}

func (tc *testCluster) diff(t *testing.T, dir, kubeconfig, ns string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runRender(t, dir, append([]string{"main.k", "--diff", "--kubeconfig", kubeconfig, "-D", "ns=" + ns}, args...)...)
}

func mustContain(t *testing.T, what, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("%s does not contain %q:\n%s", what, p, s)
		}
	}
}

func mustNotContain(t *testing.T, what, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if strings.Contains(s, p) {
			t.Errorf("%s contains %q:\n%s", what, p, s)
		}
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestDiffAgainstCluster runs render --diff against one kube-apiserver; each case works in a
// namespace of its own.
func TestDiffAgainstCluster(t *testing.T) {
	tc := startCluster(t)
	dir := files(t, map[string]string{"main.k": diffProgram})
	kubeconfig := tc.writeKubeconfig(t, "")

	t.Run("NothingLiveEveryObjectIsAdded", func(t *testing.T) {
		out, errOut, code := tc.diff(t, dir, kubeconfig, "added", "--namespace", "added")
		if code != 1 {
			t.Fatalf("code %d, want 1; err %q", code, errOut)
		}
		mustContain(t, "stdout", out, "# 3 added, 0 removed, 0 changed, 0 unchanged\n",
			"+++ b/Namespace/added\n", "+++ b/ConfigMap/added/app\n", "+++ b/Secret/added/creds\n", "+  replicas: \"1\"\n")
		// a dry-run: nothing was created
		err := tc.client.Get(context.Background(), client.ObjectKey{Name: "added"}, &unstructured.Unstructured{
			Object: map[string]any{"apiVersion": "v1", "kind": "Namespace"}})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("the namespace exists after the diff: %v", err)
		}
	})

	t.Run("AppliedNothingDiffers", func(t *testing.T) {
		tc.apply(t, dir, "same")
		// the context's namespace is the default one: no --namespace
		out, errOut, code := tc.diff(t, dir, tc.writeKubeconfig(t, "same"), "same")
		if code != 0 || out != "# no changes (3 unchanged)\n" {
			t.Fatalf("code %d, want 0; out %q err %q", code, out, errOut)
		}
	})

	t.Run("ChangedArgumentShowsAsMinusPlus", func(t *testing.T) {
		tc.apply(t, dir, "changed")
		out, errOut, code := tc.diff(t, dir, kubeconfig, "changed", "--namespace", "changed", "-D", "replicas=2")
		if code != 1 {
			t.Fatalf("code %d, want 1; err %q", code, errOut)
		}
		mustContain(t, "stdout", out, "# 0 added, 0 removed, 1 changed, 2 unchanged\n",
			"--- a/ConfigMap/changed/app\n", "+++ b/ConfigMap/changed/app\n", "-  replicas: \"1\"\n", "+  replicas: \"2\"\n")
		mustNotContain(t, "stdout", out, "managedFields", "resourceVersion", "uid:", "creationTimestamp")
	})

	t.Run("SecretValuesAreMaskedUnlessShowSecrets", func(t *testing.T) {
		testSecrets(t, tc, dir, kubeconfig)
	})

	t.Run("UnknownKindNamesTheObject", func(t *testing.T) {
		d := files(t, map[string]string{"main.k": "ns = option(\"ns\")\n" +
			"items = [{apiVersion = \"example.com/v1\", kind = \"Widget\", metadata.name = \"w\"}]\n"})
		out, errOut, code := tc.diff(t, d, kubeconfig, "default")
		if code != 2 || out != "" {
			t.Fatalf("code %d, want 2; out %q", code, out)
		}
		mustContain(t, "stderr", errOut, "Error: Widget/w: the cluster does not serve kind Widget in example.com/v1")
	})

	t.Run("RefusedDryRunIsAnError", func(t *testing.T) {
		// ConfigMap data must be strings: the server refuses the number.
		d := files(t, map[string]string{"main.k": "ns = option(\"ns\")\n" +
			"items = [{apiVersion = \"v1\", kind = \"ConfigMap\", metadata.name = \"bad\", data.n = 1}]\n"})
		_, errOut, code := tc.diff(t, d, kubeconfig, "default")
		if code != 2 {
			t.Fatalf("code %d, want 2; err %q", code, errOut)
		}
		mustContain(t, "stderr", errOut, "ConfigMap/default/bad dry-run failed")
	})
}

// testSecrets checks that no Secret value reaches stdout without --show-secrets, neither as
// rendered (stringData) nor as stored (base64 data), when added or changed.
func testSecrets(t *testing.T, tc *testCluster, dir, kubeconfig string) {
	args := []string{"--namespace", "secrets"}
	values := []string{"s3cr3t-one", b64("s3cr3t-one"), "s3cr3t-two", b64("s3cr3t-two")}

	out, _, code := tc.diff(t, dir, kubeconfig, "secrets", args...)
	mustContain(t, "added, masked", out, "+++ b/Secret/secrets/creds\n", "+  password: '***'\n")
	mustNotContain(t, "added, masked", out, values...)
	shown, _, shownCode := tc.diff(t, dir, kubeconfig, "secrets", append(args, "--show-secrets")...)
	mustContain(t, "added, --show-secrets", shown, "+  password: "+b64("s3cr3t-one")+"\n")
	if code != 1 || shownCode != 1 {
		t.Fatalf("added: codes %d and %d, want 1", code, shownCode)
	}

	tc.apply(t, dir, "secrets")
	args = append(args, "-D", "password=s3cr3t-two")
	out, _, code = tc.diff(t, dir, kubeconfig, "secrets", args...)
	mustContain(t, "changed, masked", out, "--- a/Secret/secrets/creds\n", "-  password: '***'\n", "+  password: '*** (changed)'\n")
	mustNotContain(t, "changed, masked", out, values...)
	shown, _, shownCode = tc.diff(t, dir, kubeconfig, "secrets", append(args, "--show-secrets")...)
	mustContain(t, "changed, --show-secrets", shown,
		"-  password: "+b64("s3cr3t-one")+"\n", "+  password: "+b64("s3cr3t-two")+"\n")
	if code != 1 || shownCode != 1 {
		t.Fatalf("changed: codes %d and %d, want 1", code, shownCode)
	}
}

// TestDiffUnreachableClusterExits2 needs no cluster: nothing listens on 127.0.0.1:1.
func TestDiffUnreachableClusterExits2(t *testing.T) {
	kubeconfig := deadKubeconfig(t)
	dir := files(t, map[string]string{"main.k": diffProgram})
	out, errOut, code := runRender(t, dir, "main.k", "-D", "ns=x", "--diff", "--kubeconfig", kubeconfig)
	if code != 2 || out != "" {
		t.Fatalf("code %d, want 2; out %q", code, out)
	}
	mustContain(t, "stderr", errOut, "Error: cannot reach the cluster at https://127.0.0.1:1:", "connection refused")
}

// TestDiffInvalidArgumentExits2: without --diff an invalid -D exits 1 as in kcl, but with it 1
// would read as "differences".
func TestDiffInvalidArgumentExits2(t *testing.T) {
	dir := files(t, map[string]string{"main.k": diffProgram})
	_, errOut, code := runRender(t, dir, "main.k", "-D", "novalue", "--diff")
	if code != 2 {
		t.Fatalf("code %d, want 2; err %q", code, errOut)
	}
	mustContain(t, "stderr", errOut, "Invalid value for top level arguments")
	_, errOut, code = runRender(t, dir, "main.k", "--diff", "-o", filepath.Join(dir, "out.yaml"))
	if code != 2 {
		t.Fatalf("--output with --diff: code %d, want 2; err %q", code, errOut)
	}
	mustContain(t, "stderr", errOut, "--output is the format of the differences: unified or markdown")
	if _, err := os.Stat(filepath.Join(dir, "out.yaml")); !os.IsNotExist(err) {
		t.Fatalf("--output with --diff wrote a file: %v", err)
	}
}
