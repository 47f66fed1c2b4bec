package nodeimage_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/test/nodeimage"
)

// stage is one FROM ... of a Dockerfile: its base, name and instructions.
type stage struct {
	from, name string
	instrs     [][2]string // instruction (upper case), the rest of the line
}

// parseDockerfile understands what this repository's Dockerfile uses: comments, line
// continuations, stages.
func parseDockerfile(t *testing.T, file string) []stage {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var stages []stage
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		instr, rest = strings.ToUpper(instr), strings.TrimSpace(rest)
		if instr == "FROM" {
			f := strings.Fields(rest)
			s := stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("%s: %s before FROM", file, instr)
		}
		stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, [2]string{instr, rest})
	}
	return stages
}

func (s stage) last(instr string) string {
	v := ""
	for _, in := range s.instrs {
		if in[0] == instr {
			v = in[1]
		}
	}
	return v
}

// finalStage is what the Dockerfile's final stage makes of the build: files (image path => path
// in the repository), user, entrypoint, cmd.
type finalStage struct {
	base                  string
	files                 map[string]string
	user                  string
	entrypoint, cmd       []string
	unmodeledInstructions []string
}

func readFinalStage(t *testing.T, root string) finalStage {
	t.Helper()
	stages := parseDockerfile(t, filepath.Join(root, "Dockerfile"))
	byName := map[string]stage{}
	for _, s := range stages {
		byName[s.name] = s
	}
	final := stages[len(stages)-1]
	fs := finalStage{base: final.from, files: map[string]string{}}
	for _, in := range final.instrs {
		switch in[0] {
		case "COPY":
			copyFiles(t, in[1], byName, fs.files)
		case "USER":
			fs.user = in[1]
		case "ENTRYPOINT":
			fs.entrypoint = jsonArray(t, in[1])
		case "CMD":
			fs.cmd = jsonArray(t, in[1])
		default:
			fs.unmodeledInstructions = append(fs.unmodeledInstructions, in[0]+" "+in[1])
		}
	}
	return fs
}

// copyFiles reads `COPY --from=<stage> src... dest/`: each src is relative to the build stage's
// WORKDIR, which is the repository (it does COPY . .).
func copyFiles(t *testing.T, args string, stages map[string]stage, files map[string]string) {
	t.Helper()
	f := strings.Fields(args)
	from, ok := strings.CutPrefix(f[0], "--from=")
	if !ok || len(f) < 3 {
		t.Fatalf("COPY %s: only `COPY --from=<stage> src... dest/` is understood", args)
	}
	build, ok := stages[from]
	if !ok {
		t.Fatalf("COPY --from=%s: no such stage", from)
	}
	if !strings.Contains(build.last("RUN"), "make build") {
		t.Errorf("stage %s: its last RUN is %q, not `make build` (which the controller spec's inputs come from)", from, build.last("RUN"))
	}
	workdir := build.last("WORKDIR")
	dest := f[len(f)-1]
	for _, src := range f[1 : len(f)-1] {
		rel, ok := strings.CutPrefix(src, workdir+"/")
		if !ok {
			t.Fatalf("COPY source %s is not under the build stage's WORKDIR %s", src, workdir)
		}
		files[path.Join(dest, path.Base(src))] = rel
	}
}

func jsonArray(t *testing.T, s string) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("%s: want the exec (JSON array) form: %v", s, err)
	}
	return v
}

// The Dockerfile and `make image` agree: the Dockerfile's final stage puts the same files of the
// repository at the same paths, with the same user, entrypoint and cmd, on the same Debian
// release as the controller spec. This part needs no binaries: the spec is made from
// placeholders standing at bin/ of a scratch repository.
func TestDockerfileAgreesWithControllerSpec(t *testing.T) {
	df := readFinalStage(t, repoRoot(t))
	scratch := t.TempDir()
	for _, f := range nodeimage.ControllerFiles {
		writeFile(t, filepath.Join(scratch, "bin", f), 0o755, "placeholder")
	}
	spec, err := nodeimage.ControllerSpec(base(t), filepath.Join(scratch, "bin"), "dev", nodeimage.ControllerFiles)
	if err != nil {
		t.Fatal(err)
	}
	if len(df.unmodeledInstructions) > 0 {
		t.Errorf("the Dockerfile's final stage has instructions the controller spec does not model: %q", df.unmodeledInstructions)
	}
	image, tag, _ := strings.Cut(df.base, ":")
	if image != "debian" || !strings.HasPrefix(tag, base(t).Codename) {
		t.Errorf("Dockerfile runtime base %s, spec base debian %s", df.base, base(t).Codename)
	}
	specFiles := map[string]string{}
	for _, e := range spec.Layers[len(spec.Layers)-1].Entries {
		rel, err := filepath.Rel(scratch, e.Source)
		if err != nil {
			t.Fatal(err)
		}
		specFiles[e.Path] = filepath.ToSlash(rel)
	}
	if !reflect.DeepEqual(df.files, specFiles) {
		t.Errorf("files (image path => repository path):\nDockerfile %v\nspec       %v", df.files, specFiles)
	}
	c := spec.Config
	if df.user != c.User || !reflect.DeepEqual(df.entrypoint, c.Entrypoint) || !reflect.DeepEqual(df.cmd, c.Cmd) {
		t.Errorf("Dockerfile USER %q ENTRYPOINT %q CMD %q, spec %q %q %q", df.user, df.entrypoint, df.cmd, c.User, c.Entrypoint, c.Cmd)
	}
	if c.WorkingDir != "" || len(c.Env) != 1 || !strings.HasPrefix(c.Env[0], "PATH=") {
		t.Errorf("the Dockerfile sets no WORKDIR or ENV beyond debian's PATH; the spec: %q %q", c.WorkingDir, c.Env)
	}
}

// The built controller image, from the real binaries: each file of the Dockerfile's COPY is at its
// path with the same bytes, the KCL engine finds every library it needs in the image, and the
// controller runs in it.
func TestControllerImage(t *testing.T) {
	root := repoRoot(t)
	spec, err := nodeimage.ControllerSpec(base(t), filepath.Join(root, "bin"), "dev", nodeimage.ControllerFiles)
	needInput(t, err)
	_, img := build(t, spec)
	fs := imageFS(t, img)
	for dst, rel := range readFinalStage(t, root).files {
		want, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		if _, f := fs.Resolve(dst); f == nil || !bytes.Equal(f.Data, want) {
			t.Errorf("%s: not the bytes of %s", dst, rel)
		}
	}
	needed, err := fs.NeededBy("/usr/local/bin/libkcl.so")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("libkcl.so needs %v", needed)
	for lib, at := range needed {
		if at == "" {
			t.Errorf("libkcl.so needs %s: not in the image", lib)
		}
	}
	if _, ok := needed["libgcc_s.so.1"]; !ok {
		t.Errorf("libkcl.so does not need libgcc_s.so.1 any more: libgcc-s1 could leave the base")
	}
	if m := fs.MissingLibraries(); len(m) > 0 {
		t.Errorf("missing: %v", m)
	}
	// Run as the image runs it (user 65532, read-only root, the image's environment), the
	// controller loads the KCL engine from beside itself and reports its version.
	t.Run("runs", func(t *testing.T) {
		out, err := runInImage(t, img, "version")
		if err != nil || !strings.Contains(out, "KCL engine") || !strings.Contains(out, "/usr/local/bin/libkcl.so") {
			t.Fatalf("kcl-artifact-controller version in the image: %v\n%s", err, out)
		}
		t.Log(strings.TrimSpace(out))
	})
}

// The node suite's previous release predates the worker binary and may predate the plugin: its
// bin/ has no kcl-worker, and maybe no flux-kcl. Its image is built without them
// (hack/previous-release.sh passes --without-worker, and --without-plugin), while today's image
// still refuses to be built without them, naming the make target that builds them.
func TestControllerImageOfAReleaseWithoutPluginOrWorker(t *testing.T) {
	for _, without := range [][]string{{nodeimage.PluginFile, nodeimage.WorkerFile}, {nodeimage.WorkerFile}} {
		t.Run(strings.Join(without, ","), func(t *testing.T) {
			bin := filepath.Join(t.TempDir(), "bin")
			for _, f := range nodeimage.Without(without...) {
				writeFile(t, filepath.Join(bin, f), 0o755, "placeholder")
			}
			in := nodeimage.Inputs{BinDir: bin, Version: "prev"}
			if _, err := nodeimage.Specs([]string{nodeimage.Controller}, in); !nodeimage.IsMissingInput(err) ||
				!slices.ContainsFunc(without, func(f string) bool { return strings.Contains(err.Error(), f) }) ||
				!strings.Contains(err.Error(), "make build") {
				t.Fatalf("today's image without %q: want a missing input naming one of them and `make build`, got %v", without, err)
			}
			in.ControllerFiles = nodeimage.Without(without...)
			specs, err := nodeimage.Specs([]string{nodeimage.Controller}, in)
			if err != nil {
				t.Fatal(err)
			}
			var paths []string
			for _, e := range specs[0].Layers[len(specs[0].Layers)-1].Entries {
				paths = append(paths, e.Path)
			}
			if want := len(nodeimage.ControllerFiles) - len(without); len(paths) != want || slices.ContainsFunc(without, func(f string) bool {
				return slices.Contains(paths, path.Join(nodeimage.ControllerDir, f))
			}) {
				t.Errorf("the previous release's image files %q: want the %d of ControllerFiles but %q", paths, want, without)
			}
		})
	}
}
