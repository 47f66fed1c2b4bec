package rendercmd

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

// render in CI on a pull request whose kcl.mod names lying servers: each render fails with a
// clear reason (exit 1), none crashes or hangs this process (Main runs in it), and no server's
// words reach the output. Run confined and not: the fetch process is bounded either way.
func TestRenderSurvivesHostileDependencyServers(t *testing.T) {
	const marker = "INTERNAL-SERVICE-RESPONSE: db_password=hunter2"
	liar := kclmodtest.LyingPackServer(t, 0xFFFFFFFF)
	bigError := kclmodtest.ErrorServer(t, http.StatusNotFound, "NOT-FOUND ", 1<<30)
	forged := kclmodtest.ErrorServer(t, http.StatusBadRequest, marker, int64(len(marker)))
	release := make(chan struct{})
	stall := kclmodtest.StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) { <-release })
	t.Cleanup(func() { close(release) })
	oci := func(h *kclmodtest.Hostile) string {
		return fmt.Sprintf(`lib = { oci = "oci://%s/team/lib", tag = "1.0.0" }`, h.Host)
	}
	attacks := map[string]struct{ dep, want string }{
		"lying-pack": {fmt.Sprintf(`lib = { git = "%s/git/x", branch = "main" }`, liar.Server.URL), "claims 4294967295 objects"},
		"error-body": {oci(bigError), "HTTP 404"},
		"forgery":    {oci(forged), "HTTP 400"},
		// the deadline, with the speed rule out of the way (nothing is sent at all)
		"stall": {oci(stall), "did not finish within 2s"},
	}
	for name, a := range attacks {
		for _, confined := range []bool{false, true} {
			dir := files(t, map[string]string{
				"kcl.mod": "[package]\nname = \"app\"\nedition = \"v0.11.0\"\nversion = \"0.1.0\"\n\n[dependencies]\n" + a.dep + "\n",
				"main.k":  "a = 1\n",
			})
			args := []string{".", "--deps-cache-dir", t.TempDir(), "--registry-config", "", "--deps-allowed-networks", "127.0.0.0/8",
				"--deps-timeout", "2s"}
			if confined {
				args = append(args, "--sandbox")
			}
			start := time.Now()
			out, errOut, code := runRender(t, dir, args...)
			if code != 1 || !strings.Contains(errOut, a.want) {
				t.Fatalf("%s (sandbox %v): code %d, stderr %q", name, confined, code, errOut)
			}
			if strings.Contains(out+errOut, "hunter2") || strings.Contains(out+errOut, "NOT-FOUND") {
				t.Fatalf("%s: a server's answer reached the output: %q", name, out+errOut)
			}
			t.Logf("%s (sandbox %v): %s in %s", name, confined, strings.TrimSpace(errOut), time.Since(start).Round(time.Millisecond))
		}
	}
}

// hostileText is what a program under review writes to reach the reviewer's terminal: screen
// clear, window title, an OSC 8 link, a C1 CSI, a right-to-left override, a carriage return.
const hostileText = `\x1b[2J\x1b]0;pwned\x07\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07\u009b31m\u202egnp.exe\r`

// rawControl is the first control a terminal would act on in s, or "".
func rawControl(s string) string {
	for _, r := range s {
		if r == 0x1b || r == 0x07 || r == '\r' || (r >= 0x80 && r <= 0x9f) || r == 0x202e {
			return fmt.Sprintf("%U", r)
		}
	}
	return ""
}

// What a program prints, its assert messages and its values reach stderr and a diff escaped:
// stderr and the diff are read by a human.
func TestProgramTextIsEscaped(t *testing.T) {
	dir := files(t, map[string]string{"main.k": "assert False, \"fine\\n" + hostileText + "\"\n"})
	out, errOut, code := runRender(t, dir, "main.k")
	if code != 1 || out != "" || !strings.Contains(errOut, "gnp.exe") || rawControl(errOut) != "" {
		t.Errorf("assert: code %d, stdout %q, stderr %q: want 1 and the message escaped", code, out, errOut)
	}

	// as kcl run: what the program prints, then the objects
	printed := files(t, map[string]string{"main.k": `print("` + hostileText + `")` + "\na = 1\n"})
	out, errOut, code = runRender(t, printed, "main.k")
	if code != 0 || !strings.HasSuffix(out, "gnp.exe\\r\na: 1\n") || rawControl(out) != "" {
		t.Errorf("print: code %d, stdout %q, stderr %q: want 0 and the printed text escaped", code, out, errOut)
	}

	old := files(t, map[string]string{"main.k": `[{apiVersion = "v1", kind = "ConfigMap", metadata.name = "c", data.v = "a"}]` + "\n"})
	cur := files(t, map[string]string{"main.k": `print("` + hostileText + `")` + "\n" +
		`[{apiVersion = "v1", kind = "ConfigMap", metadata.name = "c", data.v = "exe.\u202egnp.exe"}]` + "\n"})
	out, errOut, code = runRender(t, cur, "--diff-from", old, "--sandbox=false", "main.k")
	if code != 1 || !strings.Contains(out, "gnp.exe") || !strings.Contains(errOut, "gnp.exe") {
		t.Fatalf("diff: code %d, stdout %q, stderr %q: want 1 and the changed value", code, out, errOut)
	}
	if c := rawControl(out); c != "" {
		t.Errorf("the diff holds %s raw: %q", c, out)
	}
	if c := rawControl(errOut); c != "" {
		t.Errorf("stderr holds %s raw: %q", c, errOut)
	}
}
