package ociartifact

import (
	"bytes"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
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
	s, err := LoadSigner(keyPEM, []byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadVerifier(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("payload")
	sig, err := s.SignMessage(bytes.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	if err := v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(msg)); err != nil {
		t.Errorf("the pair's public key does not verify its signature: %v", err)
	}
	_, otherPub, _ := GenerateKeyPair(nil)
	other, _ := LoadVerifier(otherPub)
	if err := other.VerifySignature(bytes.NewReader(sig), bytes.NewReader(msg)); err == nil {
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
