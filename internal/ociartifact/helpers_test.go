package ociartifact

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact/ociartifacttest"

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

// tgz writes a tarball of one file, as the artifact store writes them, and returns its path.
func tgz(t *testing.T, content string) string {
	path, _ := ociartifacttest.Tarball(t, content)
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
	img, err := Image(tgz(t, content), Meta{Source: "https://git.example.com/app.git", Revision: "latest@sha256:" + strings.Repeat("0", 64)})
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
	push(t, img, ref.Context().Name(), SignatureTag(ociartifacttest.Hash(t, ref)))
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
	push(t, img, ref.Context().Name(), AttestationTag(ociartifacttest.Hash(t, ref)))
	return st
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
