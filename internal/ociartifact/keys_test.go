package ociartifact

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/secure-systems-lab/go-securesystemslib/encrypted"
)

func TestKeyPairRoundTrip(t *testing.T) {
	keyPEM, pubPEM, err := GenerateKeyPair([]byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil || block.Type != "ENCRYPTED SIGSTORE PRIVATE KEY" {
		t.Fatalf("private key PEM %q, want ENCRYPTED SIGSTORE PRIVATE KEY", keyPEM)
	}
	if !strings.HasPrefix(string(pubPEM), "-----BEGIN PUBLIC KEY-----") {
		t.Errorf("public key PEM %q", pubPEM)
	}
	sig := roundTrip(t, keyPEM, []byte("s3cret"), pubPEM)
	_, otherPub, _ := GenerateKeyPair(nil)
	other, _ := LoadVerifier(otherPub)
	if err := other.VerifySignature(bytes.NewReader(sig), bytes.NewReader([]byte(roundTripMessage))); err == nil {
		t.Error("another public key verifies the signature")
	}
}

func TestLoadSignerWrongPassword(t *testing.T) {
	keyPEM, _, err := GenerateKeyPair([]byte("right"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pw := range []string{"wrong", "", "right\n"} {
		_, err := LoadSigner(keyPEM, []byte(pw))
		if !errors.Is(err, ErrKeyPassword) || !strings.Contains(err.Error(), "wrong password") {
			t.Errorf("password %q: error %v, want ErrKeyPassword", pw, err)
		}
	}
}

// Older cosign wrote the same encrypted key under another PEM type; other types are refused.
func TestLoadSignerPEMTypes(t *testing.T) {
	keyPEM, _, err := GenerateKeyPair(nil)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(keyPEM)
	block.Type = "ENCRYPTED COSIGN PRIVATE KEY"
	if _, err := LoadSigner(pem.EncodeToMemory(block), nil); err != nil {
		t.Errorf("ENCRYPTED COSIGN PRIVATE KEY: %v", err)
	}
	block.Type = "PRIVATE KEY"
	if _, err := LoadSigner(pem.EncodeToMemory(block), nil); err == nil || errors.Is(err, ErrKeyPassword) {
		t.Errorf("PRIVATE KEY: error %v, want a PEM type error", err)
	}
	if _, err := LoadSigner([]byte("not PEM"), nil); err == nil {
		t.Error("not PEM: no error")
	}
}

func TestLoadVerifierRefusesAPrivateKey(t *testing.T) {
	keyPEM, _, err := GenerateKeyPair(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadVerifier(keyPEM); err == nil {
		t.Error("a private key PEM loaded as a verifier")
	}
}

// testdata/cosign-v3.0.6.{key,pub} were written by cosign v3.0.6's own cosign.GenerateKeyPair
// (what `cosign generate-key-pair` calls; the version source-controller v1.9.6 links) with the
// password below. A test key, for these tests only.
const cosignTestPassword = "kcl-test-password"

func TestLoadSignerReadsACosignGeneratedKey(t *testing.T) {
	keyPEM, err := os.ReadFile("testdata/cosign-v3.0.6.key")
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := os.ReadFile("testdata/cosign-v3.0.6.pub")
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, keyPEM, []byte(cosignTestPassword), pubPEM)
	if _, err := LoadSigner(keyPEM, []byte("kcl-test-passwor")); !errors.Is(err, ErrKeyPassword) {
		t.Errorf("wrong password: error %v, want ErrKeyPassword", err)
	}
}

// Older cosign wrote "ENCRYPTED COSIGN PRIVATE KEY" with go-securesystemslib's legacy scrypt
// parameters (N=2^15).
func TestLoadSignerReadsALegacyCosignKey(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	enc, err := encrypted.EncryptWithCustomKDFParameters(der, []byte("old"), encrypted.Legacy)
	if err != nil {
		t.Fatal(err)
	}
	s, err := LoadSigner(pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED COSIGN PRIVATE KEY", Bytes: enc}), []byte("old"))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := s.PublicKey()
	if err != nil || !k.PublicKey.Equal(pub) {
		t.Errorf("loaded public key %v (%v), not the key's", pub, err)
	}
}

const roundTripMessage = "payload"

// roundTrip loads the key pair, signs roundTripMessage with the private key and checks the
// public key verifies it; it returns the signature.
func roundTrip(t *testing.T, keyPEM, password, pubPEM []byte) []byte {
	t.Helper()
	s, err := LoadSigner(keyPEM, password)
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadVerifier(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte(roundTripMessage)
	sig, err := s.SignMessage(bytes.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(msg)); err != nil {
		t.Errorf("the public key does not verify what the private key signed: %v", err)
	}
	return sig
}
