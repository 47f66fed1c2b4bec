package kclworker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclworker"
	"github.com/kcl-flux/kcl-artifact-controller/internal/sandbox"
)

const marker = "planted-marker-5f2c"

// tenant is a namespace's staging root with one package in it, and a secret outside it.
type tenant struct {
	domain kclworker.Domain
	pkg    string
	secret string // a file outside the root holding marker
}

func newTenant(t *testing.T, name string) tenant {
	t.Helper()
	if err := sandbox.Check(); err != nil {
		t.Fatalf("this test needs Landlock: %v", err)
	}
	base := t.TempDir()
	root := filepath.Join(base, "staging", name)
	pkg := filepath.Join(root, "render-1", "source", "app")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(base, "secret.txt")
	if err := os.WriteFile(secret, []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	return tenant{domain: kclworker.Domain{Name: name, Roots: []string{root}}, pkg: pkg, secret: secret}
}

// run renders code as the package's main.k in a session of the tenant's domain.
func (tn tenant) run(t *testing.T, p *kclworker.Pool, code string) (string, error) {
	t.Helper()
	f := filepath.Join(tn.pkg, "main.k")
	if err := os.WriteFile(f, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	s := p.Session(tn.domain, tn.pkg)
	call := func(m string, b []byte) ([]byte, error) { return s.Call(context.Background(), m, b) }
	res, err := kcllib.ExecProgram(call, &kcllib.ExecProgramArgs{KFilenameList: []string{f}})
	if err != nil {
		return "", err
	}
	return res.YAMLResult + res.ErrMessage + res.LogMessage, nil
}

func sandboxed(t *testing.T) *kclworker.Pool {
	return newPool(t, kclworker.Options{Size: 1, Sandbox: true})
}

func noMarker(t *testing.T, out string, err error) {
	t.Helper()
	text := out
	if err != nil {
		text += err.Error()
	}
	if strings.Contains(text, marker) {
		t.Fatalf("the planted marker leaked: %q", text)
	}
}

// Each attack below succeeded before the sandbox: TestAttacksSucceedUnconfined shows the same
// programs reading and writing in an unconfined worker, so these tests fail without it.

func TestSandboxReadOutsideRoot(t *testing.T) {
	tn := newTenant(t, "tenant-a")
	out, err := tn.run(t, sandboxed(t), "import file\nx = file.read(\""+tn.secret+"\")\n")
	noMarker(t, out, err)
	if err != nil || !strings.Contains(out, "Permission denied") {
		t.Fatalf("reading outside the root must fail with permission denied, got %v %q", err, out)
	}
}

func TestSandboxRelativeReadInsidePackage(t *testing.T) {
	tn := newTenant(t, "tenant-a")
	if err := os.WriteFile(filepath.Join(tn.pkg, "values.yaml"), []byte("replicas: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := tn.run(t, sandboxed(t), "import file\nimport yaml\nv = yaml.decode(file.read(\"values.yaml\"))\n")
	if err != nil || !strings.Contains(out, "replicas: 3") {
		t.Fatalf("a package reading its own file by relative path must render: %v %q", err, out)
	}
}

func TestSandboxEnvironmentIsEmpty(t *testing.T) {
	t.Setenv("KCL_SANDBOX_MARKER", marker)
	tn := newTenant(t, "tenant-a")
	p := sandboxed(t)
	out, err := tn.run(t, p, "import file\nx = file.read_env(\"KCL_SANDBOX_MARKER\")\nh = file.read_env(\"HOME\")\n")
	noMarker(t, out, err)
	out, err = tn.run(t, p, "import file\nx = [file.read(f) for f in file.glob(\"/proc/*/environ\")]\n")
	noMarker(t, out, err)
}

func TestSandboxNoWrites(t *testing.T) {
	tn := newTenant(t, "tenant-a")
	outside := filepath.Join(filepath.Dir(tn.secret), "written.txt")
	inside := filepath.Join(tn.pkg, "written.txt")
	p := sandboxed(t)
	for _, target := range []string{outside, inside} {
		out, err := tn.run(t, p, "import file\nfile.write(\""+target+"\", \"x\")\nx = 1\n")
		if err != nil || !strings.Contains(out, "Permission denied") {
			t.Errorf("writing %s must fail with permission denied, got %v %q", target, err, out)
		}
		if _, err := os.Stat(target); err == nil {
			t.Errorf("%s was created", target)
		}
	}
	out, err := tn.run(t, p, "import file\nfile.mkdir(\""+filepath.Join(tn.pkg, "d")+"\")\nx = 1\n")
	if _, serr := os.Stat(filepath.Join(tn.pkg, "d")); serr == nil {
		t.Errorf("a directory was created: %v %q", err, out)
	}
}

func TestSandboxOtherTenantInvisible(t *testing.T) {
	a, b := newTenant(t, "tenant-a"), newTenant(t, "tenant-b")
	if err := os.WriteFile(filepath.Join(a.pkg, "secret.k"), []byte("s = \""+marker+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := sandboxed(t)
	out, err := b.run(t, p, "import file\nx = file.read(\""+filepath.Join(a.pkg, "secret.k")+"\")\n")
	noMarker(t, out, err)
	out, err = b.run(t, p, "import file\nx = file.glob(\""+filepath.Dir(a.domain.Roots[0])+"/**\")\n")
	noMarker(t, out, err)
	if strings.Contains(out, "tenant-a") {
		t.Fatalf("tenant b listed tenant a's staging root: %q", out)
	}
}

// The forged frame of the issue: the answer channel reopened through /proc and written to.
func TestSandboxCannotForgeAnswer(t *testing.T) {
	tn := newTenant(t, "tenant-a")
	p := sandboxed(t)
	out, err := tn.run(t, p, "import file\nfile.write(\"/proc/self/fd/3\", \"\\x00\\x00\\x00\\x01\\x00\")\nevil = 1\n")
	// A socket cannot be reopened through /proc (ENXIO); Landlock would refuse it too.
	if err != nil || !strings.Contains(out, "No such device") && !strings.Contains(out, "Permission denied") {
		t.Fatalf("the write to the channel must be refused: %v %q", err, out)
	}
	out, err = tn.run(t, p, "mine = 2\n")
	if err != nil || strings.TrimSpace(out) != "mine: 2" {
		t.Fatalf("the next render must get its own output: %v %q", err, out)
	}
}

func TestDomainsNeverShareAWorker(t *testing.T) {
	a, b := newTenant(t, "tenant-a"), newTenant(t, "tenant-b")
	p := sandboxed(t)
	for _, tn := range []tenant{a, b, a, b} {
		if out, err := tn.run(t, p, "v = 1\n"); err != nil || strings.TrimSpace(out) != "v: 1" {
			t.Fatalf("render in %s: %v %q", tn.domain.Name, err, out)
		}
	}
	pa, pb := p.IdlePIDs("tenant-a"), p.IdlePIDs("tenant-b")
	if len(pa) != 1 || len(pb) != 1 || pa[0] == pb[0] {
		t.Fatalf("want one warm worker per domain, got a=%v b=%v", pa, pb)
	}
	if s := p.Stats(); s.Started != 2 {
		t.Fatalf("two domains, four renders: want 2 workers started, got %+v", s)
	}
	p.Retire("tenant-a")
	if len(p.IdlePIDs("tenant-a")) != 0 || len(p.IdlePIDs("tenant-b")) != 1 {
		t.Fatalf("Retire stops exactly that domain's workers: a=%v b=%v", p.IdlePIDs("tenant-a"), p.IdlePIDs("tenant-b"))
	}
}

// TestAttacksSucceedUnconfined runs the same attacks in an unconfined worker: they work there,
// which is what the tests above would see without the sandbox.
func TestAttacksSucceedUnconfined(t *testing.T) {
	tn := newTenant(t, "tenant-a")
	p := newPool(t, kclworker.Options{Size: 1})
	tn.domain.Roots = nil
	out, err := tn.run(t, p, "import file\nx = file.read(\""+tn.secret+"\")\n")
	if err != nil || !strings.Contains(out, marker) {
		t.Fatalf("unconfined, the read outside should succeed: %v %q", err, out)
	}
	target := filepath.Join(filepath.Dir(tn.secret), "written.txt")
	if _, err := tn.run(t, p, "import file\nfile.write(\""+target+"\", \"x\")\nx = 1\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(target); err != nil {
		t.Fatalf("unconfined, the write outside should succeed: %v", err)
	}
}

func TestProtocolViolationKillsWorker(t *testing.T) {
	forger, err := kclworker.New(kclworker.Options{Size: 1, Command: []string{os.Args[0], kclworker.ForgingWorker}})
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	_, err = forger.Call(context.Background(), kcllib.MethodGetVersion, nil)
	workerError(t, err, kclworker.ReasonProtocol)
	if s := forger.Stats(); s.Violations != 1 || len(forger.IdlePIDs("")) != 0 {
		t.Fatalf("the worker must be counted and not kept: %+v idle %v", s, forger.IdlePIDs(""))
	}
}

func TestIdleWorkersAreBoundedAcrossDomains(t *testing.T) {
	p := newPool(t, kclworker.Options{Size: 1, MaxIdle: 2, Sandbox: true})
	tenants := []tenant{newTenant(t, "ns-1"), newTenant(t, "ns-2"), newTenant(t, "ns-3")}
	for _, tn := range tenants {
		if out, err := tn.run(t, p, "v = 1\n"); err != nil || strings.TrimSpace(out) != "v: 1" {
			t.Fatalf("%v %q", err, out)
		}
	}
	// the least recently used domain lost its worker
	if len(p.IdlePIDs("ns-1")) != 0 || len(p.IdlePIDs("ns-2")) != 1 || len(p.IdlePIDs("ns-3")) != 1 {
		t.Fatalf("want ns-1 evicted: %v %v %v", p.IdlePIDs("ns-1"), p.IdlePIDs("ns-2"), p.IdlePIDs("ns-3"))
	}
	if s := p.Stats(); s.Evicted != 1 || s.Started != 3 {
		t.Fatalf("%+v", s)
	}
}

func TestIdleWorkersExpire(t *testing.T) {
	p := newPool(t, kclworker.Options{Size: 1, IdleTimeout: 100 * time.Millisecond, Sandbox: true})
	tn := newTenant(t, "ns-1")
	if _, err := tn.run(t, p, "v = 1\n"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for p.Stats().Evicted == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the idle worker was not stopped: %+v", p.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(p.IdlePIDs("ns-1")) != 0 {
		t.Fatal("an expired worker is still idle")
	}
}

func TestSandboxedPoolRefusesADomainWithoutRoot(t *testing.T) {
	p := sandboxed(t)
	if _, err := p.Call(context.Background(), kcllib.MethodGetVersion, nil); err == nil {
		t.Fatal("a sandboxed pool ran an unconfined call")
	}
}

func TestOutputOverTheBoundFailsAndKeepsTheWorker(t *testing.T) {
	tn := newTenant(t, "tenant-a")
	p := newPool(t, kclworker.Options{Size: 1, Sandbox: true, MaxOutput: 1 << 20})
	_, err := tn.run(t, p, "s = \"x\" * 3000000\n")
	var big *kclworker.OutputTooLargeError
	if !errors.As(err, &big) || big.Max != 1<<20 || big.Size < 3000000 {
		t.Fatalf("want OutputTooLargeError over 1 MiB, got %v", err)
	}
	if out, err := tn.run(t, p, "v = 1\n"); err != nil || strings.TrimSpace(out) != "v: 1" {
		t.Fatalf("the next render: %v %q", err, out)
	}
	if s := p.Stats(); s.Started != 1 {
		t.Fatalf("an oversized output must not cost the worker: %+v", s)
	}
}

// A frame announcing more than the bound is refused before anything is allocated for it.
func TestHugeFrameIsRefusedBeforeAllocation(t *testing.T) {
	p, err := kclworker.New(kclworker.Options{Size: 1, Command: []string{os.Args[0], kclworker.HugeFrameWorker}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = p.Call(context.Background(), kcllib.MethodGetVersion, nil)
	runtime.ReadMemStats(&after)
	workerError(t, err, kclworker.ReasonProtocol)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Fatalf("%d bytes allocated for a refused frame", grew)
	}
}
