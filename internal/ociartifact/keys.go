package ociartifact

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	"github.com/secure-systems-lab/go-securesystemslib/encrypted"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// PEM types of cosign's encrypted private key (cosign pkg/cosign/keys.go): generate-key-pair
// writes the first, older cosign versions the second.
const (
	SigstorePrivateKeyPEMType = "ENCRYPTED SIGSTORE PRIVATE KEY"
	CosignPrivateKeyPEMType   = "ENCRYPTED COSIGN PRIVATE KEY"
)

// ErrKeyPassword is returned by LoadSigner when the key does not decrypt with the password.
var ErrKeyPassword = errors.New("cosign private key: wrong password (or a corrupt key)")

// errDecryptFailed is go-securesystemslib's message for a secretbox that does not open, the one
// thing a wrong password gives (keys_test checks that it still is).
const errDecryptFailed = "encrypted: decryption failed"

// LoadSigner reads cosign.key with its password (the bytes of cosign.password, not trimmed: cosign
// does not trim it either). ECDSA, RSA and Ed25519 keys are read; signatures hash with SHA-256,
// the hash source-controller verifies with. Decrypting costs one scrypt derivation: r=8 and
// N=2^16 for cosign's keys (64 MiB, a fraction of a second), up to N=2^17 (128 MiB) for keys
// encrypted otherwise. Load the key once per push, and count that memory in the caller's limits.
func LoadSigner(keyPEM, password []byte) (signature.SignerVerifier, error) {
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, errors.New("cosign private key: no PEM block")
	}
	if block.Type != SigstorePrivateKeyPEMType && block.Type != CosignPrivateKeyPEMType {
		return nil, fmt.Errorf("cosign private key: PEM type %q, want %q", block.Type, SigstorePrivateKeyPEMType)
	}
	der, err := encrypted.Decrypt(block.Bytes, password)
	if err != nil {
		if err.Error() == errDecryptFailed {
			return nil, ErrKeyPassword
		}
		return nil, fmt.Errorf("cosign private key: %w", err)
	}
	pk, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("cosign private key: %w", err)
	}
	sv, err := signature.LoadSignerVerifier(pk, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("cosign private key: %w", err)
	}
	return sv, nil
}

// LoadVerifier reads cosign.pub (a PKIX public key in PEM) as source-controller does
// (cryptoutils.UnmarshalPEMToPublicKey, then signature.LoadVerifier with SHA-256).
func LoadVerifier(pubPEM []byte) (signature.Verifier, error) {
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(pubPEM)
	if err != nil {
		return nil, fmt.Errorf("cosign public key: %w", err)
	}
	v, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("cosign public key: %w", err)
	}
	return v, nil
}

// GenerateKeyPair makes a key pair as `cosign generate-key-pair` does: ECDSA P-256, PKCS #8
// encrypted with go-securesystemslib's encrypted.Encrypt (scrypt, secretbox) under PEM type
// "ENCRYPTED SIGSTORE PRIVATE KEY", and the public key in PKIX PEM. An empty password is allowed,
// as cosign allows it.
func GenerateKeyPair(password []byte) (keyPEM, pubPEM []byte, err error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	enc, err := encrypted.Encrypt(der, password)
	if err != nil {
		return nil, nil, err
	}
	pubPEM, err = cryptoutils.MarshalPublicKeyToPEM(priv.Public())
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: SigstorePrivateKeyPEMType, Bytes: enc}), pubPEM, nil
}
