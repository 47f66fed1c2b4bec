// Package ociartifacttest writes what the OCI artifact tests push: artifact tarballs as the
// artifact store writes them.
package ociartifacttest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Tarball writes a tar.gz of one YAML file, as the artifact store writes them (a "." directory,
// then the file, no times), and returns its path and digest ("sha256:<hex>").
func Tarball(t testing.TB, content string) (string, string) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, h := range []*tar.Header{
		{Typeflag: tar.TypeDir, Name: ".", Mode: 0o750},
		{Typeflag: tar.TypeReg, Name: "deploy.yaml", Mode: 0o600, Size: int64(len(content))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.WriteString(tw, content); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "artifact.tar.gz")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return path, "sha256:" + hex.EncodeToString(sum[:])
}

// Hash is the digest of ref as a v1.Hash.
func Hash(t testing.TB, ref name.Digest) v1.Hash {
	t.Helper()
	h, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		t.Fatal(err)
	}
	return h
}
