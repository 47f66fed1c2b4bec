package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

const (
	// chromiumPath is Debian's chromium, which hack/install-deps.sh installs.
	chromiumPath = "/usr/bin/chromium"
	// browserStepTimeout bounds one step in the browser: a page load and its checks.
	browserStepTimeout = 30 * time.Second
)

// TestUI drives the browser view (--ui-addr) in headless Chromium: after a commit changes a
// KCLArtifact's objects, the list shows it with its new revision, its page shows both kept
// revisions and the diff between them (markup in a value shown as text, Secret values masked),
// and the compare form turns the diff around. Full-page screenshots are written as test
// artifacts for a person to look at.
func TestUI(t *testing.T) {
	t.Parallel()
	if kclController().UIAddr == "" {
		t.Fatal("the suite's controller runs without --ui-addr")
	}
	base := "http://" + kclController().UIAddr
	ns := newNamespace(t, "ui")
	rev1 := gitRevision(createRepo(t, ns, uiProgram("1", false)))
	createGitRepository(t, ns, "app", ns)
	create(t, newKCLArtifact(ns, "app", "app", nil))
	first := waitKCLArtifactReady(t, ns, "app", rev1).Status.Artifact
	rev2 := commit(t, ns, "version 2 and an extra object", uiProgram("2", true))
	waitKCLArtifactReady(t, ns, "app", rev2)
	second := waitHistory(t, ns, "app", 2).Status.Artifact
	// The view reads the controller's cache, which may lag behind what this test read.
	page := base + "/kclartifact/" + ns + "/app/"
	waitFor(t, ns, "the view of "+ns+"/app to show "+second.Revision, func(ctx context.Context) (bool, string, error) {
		code, body, err := httpGet(t, page)
		if err != nil {
			return false, err.Error(), nil
		}
		return code == http.StatusOK && strings.Contains(string(body), second.Revision), fmt.Sprintf("GET %s: %d", page, code), nil
	})

	ctx := newBrowser(t)
	shots := screenshotDir(t)

	t.Run("list", func(t *testing.T) {
		row := "#ka-" + ns + "-app"
		browse(t, ctx, base+"/", row)
		text := elementText(t, ctx, row)
		expectContainsAll(t, "the list's row of "+ns+"/app", text, ns, "app", "True", second.Revision, rev2)
		expectNoSubresources(t, ctx)
		screenshot(t, ctx, filepath.Join(shots, "ui-list.png"))
	})

	t.Run("KCLArtifact page", func(t *testing.T) {
		browse(t, ctx, page, "#diff-summary")
		expectContainsAll(t, "the heading", elementText(t, ctx, "h1"), ns, "app")
		expectText(t, ctx, "#current-revision", second.Revision)
		expectText(t, ctx, "#source-revision", rev2)
		expectContainsAll(t, "the history", elementText(t, ctx, "#history-table"), first.Revision, second.Revision, rev1, rev2, "current")
		expectText(t, ctx, "#diff-from", first.Revision)
		expectText(t, ctx, "#diff-to", second.Revision)
		expectContainsAll(t, "the diff summary", elementText(t, ctx, "#diff-summary"), "1 added", "0 removed", "2 changed")
		expectDiffLines(t, ctx, "del", `version: "1"`, "token: '***'")
		expectDiffLines(t, ctx, "add", `version: "2"`, "name: app-extra", "token: '*** (changed)'")
		expectContainsAll(t, "the object list", elementText(t, ctx, "#object-table"), "ConfigMap", "Secret", ns,
			"app-config", "app-secret", "app-extra")
		expectSafe(t, ctx)
		expectNoSubresources(t, ctx)
		screenshot(t, ctx, filepath.Join(shots, "ui-kclartifact.png"))
	})

	t.Run("compare form", func(t *testing.T) {
		// newest to oldest: the extra object goes away
		sctx, cancel := stepCtx(ctx)
		defer cancel()
		must(t, "choosing from and to", chromedp.Do(sctx,
			chromedp.SetValue(chromedp.CSS(`select[name="from"]`), second.Digest),
			chromedp.SetValue(chromedp.CSS(`select[name="to"]`), first.Digest)))
		resp, err := chromedp.RunResponse(sctx, chromedp.Click(chromedp.CSS("form.compare button")))
		if err != nil {
			t.Fatalf("submitting the compare form: %v", err)
		}
		if resp.Status != http.StatusOK {
			t.Fatalf("submitting the compare form: HTTP %d", resp.Status)
		}
		loc, err := chromedp.Run(sctx, chromedp.Location())
		must(t, "reading the location", err)
		if want := "from=" + url.QueryEscape(second.Digest); !strings.Contains(loc, want) {
			t.Errorf("the form led to %s, want a query with %s", loc, want)
		}
		expectText(t, ctx, "#diff-from", second.Revision)
		expectText(t, ctx, "#diff-to", first.Revision)
		expectContainsAll(t, "the diff summary", elementText(t, ctx, "#diff-summary"), "0 added", "1 removed", "2 changed")
		expectDiffLines(t, ctx, "del", `version: "2"`, "name: app-extra")
		expectDiffLines(t, ctx, "add", `version: "1"`)
		screenshot(t, ctx, filepath.Join(shots, "ui-diff-reversed.png"))
	})

	t.Run("not found", func(t *testing.T) {
		u := base + "/kclartifact/" + ns + "/nothing/"
		code, body, err := httpGet(t, u)
		if err != nil || code != http.StatusNotFound {
			t.Errorf("GET %s: %d %v, want 404", u, code, err)
		}
		expectContainsAll(t, "GET "+u, string(body), "Not found", ns+"/nothing")
	})
}

// uiNote is a ConfigMap value holding markup: the page must show it as text, and never run it.
const uiNote = `<script>window.owned = true</script><b>bold</b>`

// uiProgram renders ConfigMap app-config (data.version, and uiNote), Secret app-secret (a
// token that changes with the version) and, with extra, ConfigMap app-extra.
func uiProgram(version string, extra bool) map[string]string {
	extraItem := ""
	if extra {
		extraItem = `    {
        apiVersion = "v1"
        kind = "ConfigMap"
        metadata = {name = "app-extra", namespace = _ns}
        data = {replicas = "3"}
    }
`
	}
	main := `_ns = option("namespace", type="str", required=True)
items = [
    {
        apiVersion = "v1"
        kind = "ConfigMap"
        metadata = {name = "app-config", namespace = _ns}
        data = {version = "` + version + `", note = "` + uiNote + `"}
    }
    {
        apiVersion = "v1"
        kind = "Secret"
        metadata = {name = "app-secret", namespace = _ns}
        stringData = {token = "` + uiSecret(version) + `"}
    }
` + extraItem + `]
`
	return map[string]string{"main.k": main}
}

func uiSecret(version string) string { return "ui-secret-token-" + version }

// expectSafe checks that the page shows the markup of the rendered YAML as text without running
// it, and masks the Secret's values.
func expectSafe(t *testing.T, ctx context.Context) {
	t.Helper()
	yaml := elementText(t, ctx, "#yaml ~ details")
	expectContainsAll(t, "the YAML of app-config", yaml, "note: "+uiNote)
	sctx, cancel := stepCtx(ctx)
	defer cancel()
	state, err := chromedp.Run(sctx, chromedp.Evaluate[[]any](
		`[typeof window.owned, document.querySelectorAll("main script, main b").length, document.body.innerText]`))
	if err != nil {
		t.Fatalf("reading the page: %v", err)
	}
	if state[0] != "undefined" || state[1] != float64(0) {
		t.Errorf("the markup of a ConfigMap value became elements of the page: window.owned is %v, %v script or b elements", state[0], state[1])
	}
	text, _ := state[2].(string)
	for _, v := range []string{uiSecret("1"), uiSecret("2")} {
		if strings.Contains(text, v) {
			t.Errorf("the page shows the Secret value %q", v)
		}
	}
	expectContainsAll(t, "the page", text, "token: '***'")
}

// waitHistory waits until the KCLArtifact keeps n artifacts, the current one first.
func waitHistory(t *testing.T, ns, name string, n int) *kclv1.KCLArtifact {
	t.Helper()
	obj := &kclv1.KCLArtifact{}
	waitFor(t, ns, fmt.Sprintf("KCLArtifact %s/%s to keep %d artifacts", ns, name, n), func(ctx context.Context) (bool, string, error) {
		if err := suite.env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return false, "", err
		}
		a := obj.Status.Artifact
		ok := a != nil && len(obj.Status.History) >= n && obj.Status.History[0].Digest == a.Digest
		return ok, fmt.Sprintf("%d kept; %s", len(obj.Status.History), kclArtifactState(obj)), nil
	})
	return obj
}

// newBrowser starts headless Chromium with a fresh profile; it ends with the test.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("%s is missing (hack/install-deps.sh installs Debian's chromium): %v", chromiumPath, err)
	}
	profile := t.TempDir() // removed after the browser has exited: cleanups run last-in first-out
	log, err := os.Create(filepath.Join(screenshotDir(t), "chromium.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1366, 900), // a laptop screen
		chromedp.CombinedOutput(log),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first action starts the browser and binds its life to the context it runs with, so
	// that context has no deadline (each step bounds itself); a start that hangs is cancelled.
	watchdog := time.AfterFunc(time.Minute, cancel)
	err = chromedp.Do(ctx)
	if !watchdog.Stop() {
		err = fmt.Errorf("no answer in a minute: %w", err)
	}
	if err != nil {
		t.Fatalf("starting %s: %v (its output: %s)", chromiumPath, err, log.Name())
	}
	return ctx
}

// must fails the test when a browser step failed.
func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func stepCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, browserStepTimeout)
}

// browse loads u and waits until the element sel is visible.
func browse(t *testing.T, ctx context.Context, u, sel string) {
	t.Helper()
	sctx, cancel := stepCtx(ctx)
	defer cancel()
	resp, err := chromedp.Run(sctx, chromedp.NavigateResponse(u))
	if err != nil {
		t.Fatalf("loading %s: %v", u, err)
	}
	if resp.Status != http.StatusOK {
		t.Fatalf("loading %s: HTTP %d", u, resp.Status)
	}
	must(t, "waiting for "+sel+" on "+u, chromedp.Do(sctx, chromedp.WaitVisible(chromedp.CSS(sel))))
}

// elementText is the text of the first element sel matches, as the browser shows it.
func elementText(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	sctx, cancel := stepCtx(ctx)
	defer cancel()
	s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("the text of %s: %v", sel, err)
	}
	return s
}

func expectText(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	if got := strings.TrimSpace(elementText(t, ctx, sel)); got != want {
		t.Errorf("%s shows %q, want %q", sel, got, want)
	}
}

// expectDiffLines checks that the diff has lines of class (add or del) whose YAML, after the
// +/- and the indentation, is each of want.
func expectDiffLines(t *testing.T, ctx context.Context, class string, want ...string) {
	t.Helper()
	sctx, cancel := stepCtx(ctx)
	defer cancel()
	lines, err := chromedp.Run(sctx, chromedp.Evaluate[[]string](
		`Array.from(document.querySelectorAll("pre.diff span.`+class+`")).map(e => e.textContent)`))
	if err != nil {
		t.Fatalf("reading the diff lines: %v", err)
	}
	var yaml []string
	for _, l := range lines {
		yaml = append(yaml, strings.TrimSpace(l[1:]))
	}
	for _, w := range want {
		if !slices.Contains(yaml, w) {
			t.Errorf("the diff has no %s line %q; its %s lines: %q", class, w, class, lines)
		}
	}
}

// expectNoSubresources checks that the page loaded nothing besides itself: no style sheet,
// script, font or image, local or remote (clusters are often offline).
func expectNoSubresources(t *testing.T, ctx context.Context) {
	t.Helper()
	sctx, cancel := stepCtx(ctx)
	defer cancel()
	names, err := chromedp.Run(sctx, chromedp.Evaluate[[]string](`performance.getEntriesByType("resource").map(e => e.name)`))
	if err != nil {
		t.Fatalf("reading the page's resources: %v", err)
	}
	if len(names) > 0 {
		t.Errorf("the page loaded %v", names)
	}
}

// screenshotDir is where screenshots go: $E2E_ARTIFACTS/ui, or bin/test-artifacts/ui.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(suite.repo, "bin", "test-artifacts", "ui")
	if d := os.Getenv("E2E_ARTIFACTS"); d != "" {
		dir = filepath.Join(d, "ui")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// screenshot writes a full-page PNG of the current page.
func screenshot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	sctx, cancel := stepCtx(ctx)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
