package ui

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's chromium, which hack/install-deps.sh installs (as test/e2e uses it).
const chromiumPath = "/usr/bin/chromium"

// newBrowser starts headless Chromium, width px wide, with a fresh profile; it ends with the
// test. Without Chromium the test skips, except under CI=true.
func newBrowser(t *testing.T, width int) context.Context {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is missing (hack/install-deps.sh installs Debian's chromium): %v", chromiumPath, err)
		}
		t.Skipf("SKIP: %s is missing: %v", chromiumPath, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// The first action starts the browser and binds its life to ctx, which has no deadline; a
	// start that hangs is cancelled.
	watchdog := time.AfterFunc(time.Minute, cancel)
	err := chromedp.Do(ctx)
	if !watchdog.Stop() {
		err = fmt.Errorf("no answer in a minute: %w", err)
	}
	if err != nil {
		t.Fatalf("starting %s: %v", chromiumPath, err)
	}
	return ctx
}

// overflowJS lists the elements under the selectors whose right edge lies beyond the viewport's
// content (clientWidth: the window less a vertical scrollbar, when it takes room).
const overflowJS = `(() => {
  const out = [];
  const vw = document.documentElement.clientWidth;
  for (const sel of %q.split(",")) {
    const roots = document.querySelectorAll(sel);
    if (roots.length === 0) { out.push("no element " + sel); continue; }
    for (const root of roots) {
      for (const el of [root, ...root.querySelectorAll("*")]) {
        const r = el.getBoundingClientRect();
        if (r.width === 0 && r.height === 0) continue;
        if (r.right > vw + 0.5) {
          out.push(sel + " " + el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
            (el.className ? "." + String(el.className).replace(/ /g, ".") : "") +
            ": right edge " + Math.round(r.right) + " > " + vw + " (" + el.textContent.trim().slice(0, 40) + ")");
        }
      }
    }
  }
  return out;
})()`

// The pipeline and the Changes section of a stage's page fit a 1280 px wide window: no element
// of either reaches past the viewport's right edge (the Published column of the compared pair
// used to be cut off), and the page scrolls no wider than the window.
func TestStagePageFits1280Pixels(t *testing.T) {
	p := newPipeline(t)
	srv := p.server(t, Options{})
	ctx := newBrowser(t, 1280)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("loading the page", chromedp.Do(sctx, chromedp.Navigate(srv.URL+"/kclartifact/team-a/staging/"),
		chromedp.WaitVisible(chromedp.CSS("#diff-pair"))))
	width, err := chromedp.Run(sctx, chromedp.Evaluate[int](`window.innerWidth`))
	must("reading the width", err)
	scrollWidth, err := chromedp.Run(sctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
	must("reading the scroll width", err)
	clientWidth, err := chromedp.Run(sctx, chromedp.Evaluate[int](`document.documentElement.clientWidth`))
	must("reading the client width", err)
	t.Logf("window %d px, content %d px, page %d px wide", width, clientWidth, scrollWidth)
	overflow, err := chromedp.Run(sctx, chromedp.Evaluate[[]string](fmt.Sprintf(overflowJS, "#pipeline-stages,form.compare,#diff-pair,#diff-inputs,#diff-summary")))
	must("measuring", err)
	if width != 1280 {
		t.Fatalf("the viewport is %d px wide, want 1280", width)
	}
	for _, o := range overflow {
		t.Errorf("at 1280 px: %s", o)
	}
	if scrollWidth > clientWidth {
		wide, _ := chromedp.Run(sctx, chromedp.Evaluate[[]string](fmt.Sprintf(overflowJS, "main")))
		t.Errorf("the page scrolls %d px wide in %d px: %s", scrollWidth, clientWidth, strings.Join(wide, "\n"))
	}
	changes, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS("#diff-pair")))
	must("reading the compared pair", err)
	pipeline, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS("#pipeline-stages")))
	must("reading the pipeline", err)
	screenshot(t, sctx, "stage-1280.png")
	// the list of KCLArtifacts, stages marked, fits too
	must("loading the list", chromedp.Do(sctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#kclartifacts"))))
	listOverflow, err := chromedp.Run(sctx, chromedp.Evaluate[[]string](fmt.Sprintf(overflowJS, "main")))
	must("measuring the list", err)
	for _, o := range listOverflow {
		t.Errorf("the list at 1280 px: %s", o)
	}
	// what fits is still there: the Published column and the revisions, whole
	expectContains(t, "the compared pair", changes, "Published", "2025-03-04 11:00:00 UTC", p.staging.Status.History[0].Revision)
	expectContains(t, "the pipeline", pipeline, "dev", "staging", "production", "web.tag=1.4.3", "soak 7m/10m",
		"waiting for approval", "outside window, opens 14:00")
	if i, j, k := strings.Index(pipeline, "dev"), strings.Index(pipeline, "staging"), strings.Index(pipeline, "production"); !(i < j && j < k) {
		t.Errorf("the pipeline does not read dev → staging → production:\n%s", pipeline)
	}
}

// screenshot writes a full-page PNG for a person to look at, as test/e2e does: into
// $E2E_ARTIFACTS/ui, or bin/test-artifacts/ui.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := filepath.Join("..", "..", "bin", "test-artifacts", "ui")
	if d := os.Getenv("E2E_ARTIFACTS"); d != "" {
		dir = filepath.Join(d, "ui")
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", filepath.Join(dir, name))
}
