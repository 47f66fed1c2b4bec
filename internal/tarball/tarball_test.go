package tarball

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"testing"
)

// archiveOf is a tar.gz of regular files, stored in the order given (name, content pairs).
func archiveOf(t *testing.T, files ...string) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for i := 0; i+1 < len(files); i += 2 {
		body := files[i+1]
		if err := tw.WriteHeader(&tar.Header{Name: files[i], Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(buf.Bytes())
}

func TestReadFile(t *testing.T) {
	f := archiveOf(t, "main/manifests.yaml", "kind: Deployment\n", "rollback/pre/manifests.yaml", "kind: Job\n")
	content, found, err := ReadFile(f, "rollback/pre/manifests.yaml", 100)
	if err != nil || !found || string(content) != "kind: Job\n" {
		t.Errorf("rollback/pre: %q %v %v", content, found, err)
	}
	if content, found, err = ReadFile(f, "rollback/post/manifests.yaml", 100); err != nil || found || content != nil {
		t.Errorf("a missing file: %q %v %v", content, found, err)
	}
	if _, _, err = ReadFile(f, "main/manifests.yaml", 5); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a file over the limit: %v", err)
	}
}

// The YAML of an archive is its YAML files in name order, one document stream, without the
// rollback phases; the limit applies to the whole stream.
func TestReadYAML(t *testing.T) {
	f := archiveOf(t, "z.yaml", "kind: Z\n", "README.md", "not yaml", "b.yaml", "---\nkind: B\n",
		"a.yml", "kind: A\n", "rollback/pre/manifests.yaml", "kind: Hook\n")
	want := "kind: A\n---\nkind: B\n---\nkind: Z\n"
	got, err := ReadYAML(f, int64(len(want)))
	if err != nil || string(got) != want {
		t.Errorf("got %q, %v, want %q", got, err, want)
	}
	if _, err := ReadYAML(f, int64(len(want))-1); !errors.Is(err, ErrTooLarge) {
		t.Errorf("YAML over the limit: %v", err)
	}
}

// Every run of files out of name order costs a read of the whole archive: more than
// maxYAMLPasses are refused before any content is copied.
func TestScanYAMLBoundsTheReads(t *testing.T) {
	reversed := func(n int) *bytes.Reader {
		var files []string
		for i := n - 1; i >= 0; i-- {
			files = append(files, fmt.Sprintf("f%03d.yaml", i), fmt.Sprintf("n: %d\n", i))
		}
		return archiveOf(t, files...)
	}
	y, err := ScanYAML(reversed(maxYAMLPasses))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := y.CopyTo(&b); err != nil || int64(b.Len()) != y.Len() {
		t.Errorf("copied %d bytes of %d: %v", b.Len(), y.Len(), err)
	}
	if _, err := ScanYAML(reversed(maxYAMLPasses + 1)); !errors.Is(err, ErrYAMLUnsorted) {
		t.Errorf("one read too many: %v", err)
	}
}
