package artifactstore

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"github.com/fluxcd/pkg/apis/meta"
)

// KeyFileName is the file in the storage directory holding the key of the artifact URLs' tokens,
// created at the first start. It is outside every artifact directory: no URL names it.
const KeyFileName = ".url-key"

// TokenParam is the query parameter of an artifact URL that carries its token.
const TokenParam = "token"

// keySize is the size of a created key, and the least a given one must have.
const keySize = 32

// loadOrCreateKey reads the key at p, or creates a random one there (mode 0600).
func loadOrCreateKey(p string) ([]byte, error) {
	key, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		key = make([]byte, keySize)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			return loadOrCreateKey(p) // another instance on the same storage created it first
		}
		if err != nil {
			return nil, fmt.Errorf("creating the URL key: %w", err)
		}
		_, err = f.Write(key)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return key, err
	}
	if err != nil {
		return nil, fmt.Errorf("reading the URL key: %w", err)
	}
	if len(key) < keySize {
		return nil, fmt.Errorf("the URL key %s has %d bytes, fewer than %d", p, len(key), keySize)
	}
	return key, nil
}

// SetURLKey makes key (at least 32 bytes, as --storage-url-key-file gives it) the key of the
// artifact URLs' tokens, instead of the one in the storage directory: replicas and restarts
// that share it keep the URLs they advertised.
func (s *Store) SetURLKey(key []byte) error {
	if len(key) < keySize {
		return fmt.Errorf("the URL key has %d bytes, fewer than %d", len(key), keySize)
	}
	s.urlKey = key
	return nil
}

// Token is the capability of the artifacts of the KCLArtifact namespace/name: the artifact
// server answers their URLs only with it. It is an HMAC of the object's directory under a key
// only the controller holds, so no other namespace's URL can be derived from public names.
func (s *Store) Token(namespace, name string) string {
	m := hmac.New(sha256.New, s.urlKey)
	m.Write([]byte("kclartifact/" + namespace + "/" + name))
	return hex.EncodeToString(m.Sum(nil))
}

// ValidToken tells, in constant time, whether token is the one of namespace/name.
func (s *Store) ValidToken(namespace, name, token string) bool {
	got, err := hex.DecodeString(token)
	if err != nil {
		return false
	}
	want, _ := hex.DecodeString(s.Token(namespace, name))
	return hmac.Equal(got, want)
}

// SetArtifactURL sets artifact's URL at the advertised address, with its object's token: the
// URL kustomize-controller downloads (it sends the query as it is).
func (s *Store) SetArtifactURL(artifact *meta.Artifact) {
	s.Storage.SetArtifactURL(artifact)
	artifact.URL = s.withToken(artifact.Path, artifact.URL)
}

// URL is the URL of file (an artifact, LatestName, NAME.yaml or "diff") of the KCLArtifact
// namespace/name at the advertised address, with its token.
func (s *Store) URL(namespace, name, file string) string {
	a := meta.Artifact{Path: "kclartifact/" + namespace + "/" + name + "/" + file}
	s.SetArtifactURL(&a)
	return a.URL
}

// withToken adds the token of the object whose artifact is at path p to u.
func (s *Store) withToken(p, u string) string {
	parts := strings.Split(strings.TrimLeft(p, "/"), "/")
	if len(parts) != 4 || parts[0] != "kclartifact" || u == "" {
		return u
	}
	parsed, err := url.Parse(u)
	if err != nil {
		return u
	}
	q := parsed.Query()
	q.Set(TokenParam, s.Token(parts[1], parts[2]))
	parsed.RawQuery = q.Encode()
	return parsed.String()
}

// TokenOf is the token an artifact URL carries, "" when none.
func TokenOf(artifactURL string) string {
	u, err := url.Parse(artifactURL)
	if err != nil {
		return ""
	}
	return u.Query().Get(TokenParam)
}

// Sibling is the URL of file (LatestName, NAME.yaml, "diff") beside the artifact URL u, with
// u's token: what a person who can read a KCLArtifact's status.artifact.url can open.
func Sibling(u, file string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return ""
	}
	parsed.Path = parsed.Path[:strings.LastIndex(parsed.Path, "/")+1] + file
	q := url.Values{}
	if t := parsed.Query().Get(TokenParam); t != "" {
		q.Set(TokenParam, t)
	}
	parsed.RawQuery = q.Encode()
	return parsed.String()
}
