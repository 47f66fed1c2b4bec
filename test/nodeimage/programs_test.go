package nodeimage_test

import (
	"archive/tar"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/test/nodeimage"
)

// start runs a program in the background; stop sends it SIGTERM and wants exit status 0 in time.
func start(t *testing.T, env []string, name string, args ...string) (stop func() string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return func() string {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s after SIGTERM: %v\n%s", name, err, out.String())
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: still running 10s after SIGTERM", name)
		}
		return out.String()
	}
}

// The pause program is static (the image has nothing else), blocks, and exits 0 on SIGTERM.
func TestPause(t *testing.T) {
	bin, err := nodeimage.BuildPause(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: not static", bin)
		}
	}
	stop := start(t, nil, bin)
	time.Sleep(300 * time.Millisecond) // it must still run: a pause that returns at once fails below
	if out := stop(); !strings.Contains(out, "shutting down") {
		t.Errorf("pause output: %q", out)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

func get(t *testing.T, url, accept string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	var resp *http.Response
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err = http.DefaultClient.Do(req); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// The demo app answers with its configuration as JSON and as text, is healthy, and stops cleanly.
func TestDemoApp(t *testing.T) {
	bin, err := nodeimage.BuildDemoApp(repoRoot(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	stop := start(t, []string{"PORT=" + port, "MESSAGE=hello from KCL", "POD_NAME=demo-7d9f"}, bin)
	url := "http://127.0.0.1:" + port
	code, body := get(t, url+"/", "")
	var got map[string]string
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil || got["message"] != "hello from KCL" || got["pod"] != "demo-7d9f" {
		t.Errorf("GET /: %d %q (%v)", code, body, err)
	}
	for _, q := range [][2]string{{"/?format=text", ""}, {"/", "text/plain"}} {
		if code, body := get(t, url+q[0], q[1]); code != 200 || body != "hello from KCL (pod demo-7d9f)\n" {
			t.Errorf("GET %s (Accept %q): %d %q", q[0], q[1], code, body)
		}
	}
	if code, _ := get(t, url+"/healthz", ""); code != 200 {
		t.Errorf("GET /healthz: %d", code)
	}
	if code, _ := get(t, url+"/nope", ""); code != 404 {
		t.Errorf("GET /nope: %d, want 404", code)
	}
	// the three answers of GET / above, in the Prometheus text format
	if code, body := get(t, url+"/metrics", ""); code != 200 || !strings.Contains(body, "demo_app_requests_total{code=\"200\"} 3\n") ||
		!strings.Contains(body, "demo_app_requests_total{code=\"500\"} 0\n") {
		t.Errorf("GET /metrics: %d %q", code, body)
	}
	stop()
	// an ERROR_RATIO that is no share stops it at start, saying why
	cmd := exec.Command(bin)
	cmd.Env = []string{"PORT=" + freePort(t), "ERROR_RATIO=half"}
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), `ERROR_RATIO="half": want a number from 0 to 1`) {
		t.Errorf("ERROR_RATIO=half: %v\n%s", err, out)
	}
}

// Every image's entrypoint is an executable regular file in the image, found as the runtime finds
// it: by absolute path, or (Flux's `source-controller`) through the image's PATH. Placeholders
// stand in for the binaries of `make build` and `make testbin`.
func TestEntrypointsResolve(t *testing.T) {
	scratch := t.TempDir()
	in := nodeimage.Inputs{
		RepoRoot: repoRoot(t), BinDir: filepath.Join(scratch, "bin"), Version: "dev", WorkDir: filepath.Join(scratch, "work"),
		SourceController:         writeFile(t, filepath.Join(scratch, "sc"), 0o755, "placeholder"),
		KustomizeController:      writeFile(t, filepath.Join(scratch, "kc"), 0o755, "placeholder"),
		ImageReflectorController: writeFile(t, filepath.Join(scratch, "irc"), 0o755, "placeholder"),
	}
	for _, f := range nodeimage.ControllerFiles {
		writeFile(t, filepath.Join(in.BinDir, f), 0o755, "placeholder")
	}
	specs, err := nodeimage.Specs(nodeimage.Targets["all"], in)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		fs := specFS(t, s)
		if p := entrypoint(fs, s.Config); p == "" {
			t.Errorf("%s: entrypoint %q not found (env %q)", s.Name, s.Config.Entrypoint, s.Config.Env)
		}
	}
}

func entrypoint(fs *nodeimage.RootFS, c nodeimage.Config) string {
	cands := []string{c.Entrypoint[0]}
	if !path.IsAbs(c.Entrypoint[0]) {
		cands = nil
		for _, e := range c.Env {
			if v, ok := strings.CutPrefix(e, "PATH="); ok {
				for _, d := range strings.Split(v, ":") {
					cands = append(cands, path.Join(d, c.Entrypoint[0]))
				}
			}
		}
	}
	for _, p := range cands {
		if real, f := fs.Resolve(p); f != nil && f.Header.Typeflag == tar.TypeReg && f.Header.Mode&0o111 != 0 {
			return real
		}
	}
	return ""
}

// fluxBinary is where `make testbin` puts the default Flux line's binary (or $<NAME>_BIN, as the
// other suites read it).
func fluxBinary(t *testing.T, name string) string {
	env := strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_BIN"
	if p := os.Getenv(env); p != "" {
		return p
	}
	return filepath.Join(repoRoot(t), "bin", "flux", name)
}

// Flux's images: the binary of `make testbin` at /usr/local/bin, entrypoint by name, user
// nobody, tagged with the version the binary was built from; it runs in the image.
func TestFluxImages(t *testing.T) {
	for _, name := range nodeimage.Targets["flux"] {
		t.Run(name, func(t *testing.T) {
			spec, err := nodeimage.FluxSpec(base(t), name, fluxBinary(t, name))
			needInput(t, err)
			c := spec.Config
			if c.User != "65534:65534" || len(c.Entrypoint) != 1 || c.Entrypoint[0] != name {
				t.Errorf("user %q entrypoint %q: want Flux's 65534:65534 and [%s]", c.User, c.Entrypoint, name)
			}
			if !strings.HasPrefix(spec.Ref, "ghcr.io/fluxcd/"+name+":v") {
				t.Errorf("ref %s", spec.Ref)
			}
			_, img := build(t, spec)
			t.Logf("%s", spec.Ref)
			t.Run("runs", func(t *testing.T) {
				out, _ := runInImage(t, img, "--help")
				if !strings.Contains(out, "--storage-path") && !strings.Contains(out, "--metrics-addr") {
					t.Errorf("%s --help in the image:\n%s", name, out)
				}
			})
		})
	}
}
