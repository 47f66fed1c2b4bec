package server

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

func tarGz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

func setup(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "storage")
	dir := filepath.Join(root, "kclartifact", "ns", "app")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "abc.tar.gz")
	os.WriteFile(archive, tarGz(t, map[string]string{"manifests.yaml": "kind: ConfigMap\n", "README.md": "x"}), 0o644)
	os.Symlink(archive, filepath.Join(dir, "latest.tar.gz"))
	os.WriteFile(filepath.Join(base, "secret.txt"), []byte("outside"), 0o644)
	os.Symlink(filepath.Join(base, "secret.txt"), filepath.Join(dir, "escape.txt"))
	h, err := Handler(root)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, archive
}

func get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestServesArtifactsAndLatestLink(t *testing.T) {
	srv, archive := setup(t)
	want, _ := os.ReadFile(archive)
	for _, p := range []string{"/kclartifact/ns/app/abc.tar.gz", "/kclartifact/ns/app/latest.tar.gz"} {
		code, body, _ := get(t, srv.URL+p)
		if code != http.StatusOK || body != string(want) {
			t.Fatalf("%s: %d, %d bytes", p, code, len(body))
		}
	}
}

func TestYAMLView(t *testing.T) {
	srv, _ := setup(t)
	code, body, hdr := get(t, srv.URL+"/kclartifact/ns/app/latest.yaml")
	if code != http.StatusOK || body != "kind: ConfigMap\n" {
		t.Fatalf("%d %q", code, body)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/yaml; charset=utf-8" {
		t.Fatalf("content type %q", ct)
	}
	if code, _, _ := get(t, srv.URL+"/kclartifact/ns/app/missing.yaml"); code != http.StatusNotFound {
		t.Fatalf("YAML view of a missing archive: %d", code)
	}
}

func TestNoListingsNoEscapes(t *testing.T) {
	srv, _ := setup(t)
	for _, p := range []string{
		"/", "/kclartifact/", "/kclartifact/ns/app", // directories
		"/kclartifact/ns/app/escape.txt", // a link out of storage
		"/../secret.txt", "/kclartifact/../../secret.txt", "/%2e%2e/secret.txt",
	} {
		code, body, _ := get(t, srv.URL+p)
		if code != http.StatusNotFound || bytes.Contains([]byte(body), []byte("outside")) {
			t.Errorf("%s: %d %q", p, code, body)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/kclartifact/ns/app/abc.tar.gz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %v %v", err, resp.Status)
	}
}
