package fluxenv

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// ModulePath is the Go module of this repository; RepoRoot looks for its go.mod.
const ModulePath = "github.com/kcl-flux/kcl-artifact-controller"

// TestBin holds the absolute paths of the binaries and CRDs built by `make testbin`
// (hack/testbin.sh), as written to bin/testbin.env.
type TestBin struct {
	KubebuilderAssets   string // KUBEBUILDER_ASSETS: directory with kube-apiserver and etcd
	KubeAPIServer       string // TEST_ASSET_KUBE_APISERVER
	Etcd                string // TEST_ASSET_ETCD
	SourceController    string // SOURCE_CONTROLLER_BIN
	KustomizeController string // KUSTOMIZE_CONTROLLER_BIN
	FluxCRDsDir         string // FLUX_CRDS_DIR
	EnvFile             string // the file the values were read from ("" if all came from the environment)

	// ImageReflectorController is optional (IMAGE_REFLECTOR_CONTROLLER_BIN): only an Env started
	// with Options.ImageReflector needs it.
	ImageReflectorController string
}

// RepoRoot returns the root of this repository: the nearest parent of the working directory
// whose go.mod declares ModulePath.
// MustRepoRoot is RepoRoot for tests: it fails t when the root cannot be found.
func MustRepoRoot(t testing.TB) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && modulePathOf(data) == ModulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", ModulePath)
		}
		dir = parent
	}
}

func modulePathOf(gomod []byte) string {
	for _, line := range bytes.Split(gomod, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// LoadTestBin reads <repo root>/bin/testbin.env. A variable already set in the environment
// overrides the file, so CI can point at binaries elsewhere; if every variable is set in the
// environment the file is not needed. The error tells how to build the binaries.
func LoadTestBin() (*TestBin, error) {
	tb := &TestBin{}
	fileValues := map[string]string{}
	root, rootErr := RepoRoot()
	if rootErr == nil {
		file := filepath.Join(root, "bin", "testbin.env")
		values, err := ReadEnvFile(file)
		switch {
		case err == nil:
			tb.EnvFile = file
			fileValues = values
		case errors.Is(err, os.ErrNotExist):
		default:
			return nil, err
		}
	}
	get := func(key string) string {
		if v := os.Getenv(key); v != "" {
			return v
		}
		return fileValues[key]
	}
	tb.KubebuilderAssets = get("KUBEBUILDER_ASSETS")
	tb.KubeAPIServer = get("TEST_ASSET_KUBE_APISERVER")
	tb.Etcd = get("TEST_ASSET_ETCD")
	tb.SourceController = get("SOURCE_CONTROLLER_BIN")
	tb.KustomizeController = get("KUSTOMIZE_CONTROLLER_BIN")
	tb.FluxCRDsDir = get("FLUX_CRDS_DIR")
	tb.ImageReflectorController = get("IMAGE_REFLECTOR_CONTROLLER_BIN")

	if tb.KubeAPIServer == "" && tb.KubebuilderAssets != "" {
		tb.KubeAPIServer = filepath.Join(tb.KubebuilderAssets, "kube-apiserver")
	}
	if tb.Etcd == "" && tb.KubebuilderAssets != "" {
		tb.Etcd = filepath.Join(tb.KubebuilderAssets, "etcd")
	}

	hint := "run `make testbin` (hack/testbin.sh) to build kube-apiserver, etcd, source-controller " +
		"and kustomize-controller into bin/ and write bin/testbin.env"
	var missing []string
	for _, kv := range [][2]string{
		{"TEST_ASSET_KUBE_APISERVER", tb.KubeAPIServer},
		{"TEST_ASSET_ETCD", tb.Etcd},
		{"SOURCE_CONTROLLER_BIN", tb.SourceController},
		{"KUSTOMIZE_CONTROLLER_BIN", tb.KustomizeController},
		{"FLUX_CRDS_DIR", tb.FluxCRDsDir},
	} {
		if kv[1] == "" {
			missing = append(missing, kv[0])
		}
	}
	if len(missing) > 0 {
		where := "bin/testbin.env not found"
		if rootErr != nil {
			where = rootErr.Error()
		} else if tb.EnvFile != "" {
			where = "not in " + tb.EnvFile
		}
		return nil, fmt.Errorf("test binaries not configured (%s; missing %s): %s",
			where, strings.Join(missing, ", "), hint)
	}
	for _, p := range []string{tb.KubeAPIServer, tb.Etcd, tb.SourceController, tb.KustomizeController} {
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("test binary %s is missing or not executable: %s", p, hint)
		}
	}
	if st, err := os.Stat(tb.FluxCRDsDir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("Flux CRD directory %s is missing: %s", tb.FluxCRDsDir, hint)
	}
	return tb, nil
}

// ReadEnvFile parses KEY=VALUE lines; blank lines and # comments are skipped, and values may be
// wrapped in single or double quotes.
func ReadEnvFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	values := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: not KEY=VALUE: %q", path, n, line)
		}
		val = strings.TrimSpace(val)
		if len(val) >= 2 && (val[0] == '"' || val[0] == '\'') && val[len(val)-1] == val[0] {
			val = val[1 : len(val)-1]
		}
		values[strings.TrimSpace(key)] = val
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return values, nil
}

// imageReflectorHint says how to get image-reflector-controller and its CRDs into bin/.
const imageReflectorHint = "run `make testbin` (hack/testbin.sh), or hack/imagereflector.sh alone for a bin/ " +
	"built before: it builds image-reflector-controller into bin/, adds its CRDs to bin/crds and " +
	"IMAGE_REFLECTOR_CONTROLLER_BIN to bin/testbin.env"

// CheckImageReflector reports whether image-reflector-controller can be started: its binary
// (IMAGE_REFLECTOR_CONTROLLER_BIN) and its CRDs in FluxCRDsDir. The error says how to build them.
func (tb *TestBin) CheckImageReflector() error {
	if tb.ImageReflectorController == "" {
		return fmt.Errorf("image-reflector-controller not configured (no IMAGE_REFLECTOR_CONTROLLER_BIN): %s",
			imageReflectorHint)
	}
	if st, err := os.Stat(tb.ImageReflectorController); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("image-reflector-controller %s is missing or not executable: %s",
			tb.ImageReflectorController, imageReflectorHint)
	}
	for _, f := range imageReflectorCRDs {
		if _, err := os.Stat(filepath.Join(tb.FluxCRDsDir, f)); err != nil {
			return fmt.Errorf("CRD %s of image-reflector-controller is not in %s: %s", f, tb.FluxCRDsDir,
				imageReflectorHint)
		}
	}
	return nil
}

// imageReflectorCRDs are the files of image-reflector-controller's config/crd/bases.
var imageReflectorCRDs = []string{"image.toolkit.fluxcd.io_imagepolicies.yaml",
	"image.toolkit.fluxcd.io_imagerepositories.yaml"}
