package ociartifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/signature"
)

// newRepository starts go-containerregistry's in-memory registry on 127.0.0.1 (plain HTTP) and
// names a repository in it.
func newRepository(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://") + "/fleet/app"
}

// writeTgz writes a tar.gz of one file, as the artifact store writes them (a "." directory, then
// the file, no times), and returns its path.
func writeTgz(t *testing.T, content string) string {
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
	return path
}

// newKey is a fresh ECDSA P-256 key, without the scrypt cost of a cosign key file.
func newKey(t *testing.T) signature.SignerVerifier {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sv, err := signature.LoadECDSASignerVerifier(k, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	return sv
}

// push writes img at repo:tag and returns repo@digest.
func push(t *testing.T, img v1.Image, repo, tag string) name.Digest {
	t.Helper()
	ref, err := name.NewTag(repo+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ref.Context().Digest(d.String())
}

// artifact pushes the image of a tarball of content at repo:tag.
func artifact(t *testing.T, repo, content string) name.Digest {
	t.Helper()
	img, err := Image(writeTgz(t, content), Meta{Source: "https://git.example.com/app.git", Revision: "latest@sha256:" + strings.Repeat("0", 64)})
	if err != nil {
		t.Fatal(err)
	}
	return push(t, img, repo, "latest")
}

// sign pushes ref's signature image by s.
func sign(t *testing.T, s signature.Signer, ref name.Digest) {
	t.Helper()
	img, err := SignatureImage(s, ref)
	if err != nil {
		t.Fatal(err)
	}
	push(t, img, ref.Context().Name(), SignatureTag(hashOf(t, ref)))
}

// attest pushes at ref's attestation tag a statement about subject (ref's digest unless another
// is given), signed by s.
func attest(t *testing.T, s signature.Signer, ref name.Digest, subject string) []byte {
	t.Helper()
	if subject == "" {
		subject = ref.DigestStr()
	}
	st := statementAbout(t, ref.Context().Name(), subject)
	img, err := AttestationImage(s, st)
	if err != nil {
		t.Fatal(err)
	}
	push(t, img, ref.Context().Name(), AttestationTag(hashOf(t, ref)))
	return st
}

func hashOf(t *testing.T, ref name.Digest) v1.Hash {
	t.Helper()
	h, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// copyImage copies the image at from to the tag of repo, as a registry writer could.
func copyImage(t *testing.T, from, repo, tag string) {
	t.Helper()
	src, err := name.ParseReference(from, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(src)
	if err != nil {
		t.Fatal(err)
	}
	push(t, img, repo, tag)
}
