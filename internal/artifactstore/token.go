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
	"github.com/fluxcd/pkg/artifact/storage"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
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
			return nil, fmt.Errorf("creating the key %s: %w", p, err)
		}
		_, err = f.Write(key)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return key, err
	}
	if err != nil {
		return nil, fmt.Errorf("reading the key %s: %w", p, err)
	}
	if len(key) < keySize {
		return nil, fmt.Errorf("the key %s has %d bytes, fewer than %d", p, len(key), keySize)
	}
	return key, nil
}

// SetURLKey makes key (at least 32 bytes, as --storage-url-key-file gives it) the key of the
// artifact URLs' tokens, instead of the one in the storage directory: replicas and restarts
// that share it keep the URLs they advertised, and the digests (Keyed), derived from it.
func (s *Store) SetURLKey(key []byte) error {
	if len(key) < keySize {
		return fmt.Errorf("the URL key has %d bytes, fewer than %d", len(key), keySize)
	}
	s.urlKey, s.digestKey = key, deriveDigestKey(key)
	return nil
}

// SetPreviousURLKey makes the server also accept the tokens of key (--storage-url-previous-key-file)
// while every URL the controller publishes carries a token of the current key: a rotation's
// grace period, during which the URLs published before it keep working until each object's next
// reconcile publishes its new ones. nil ends the grace period.
func (s *Store) SetPreviousURLKey(key []byte) error {
	if key != nil && len(key) < keySize {
		return fmt.Errorf("the previous URL key has %d bytes, fewer than %d", len(key), keySize)
	}
	s.previousURLKey = key
	return nil
}

// Token is the capability of the artifacts of the KCLArtifact namespace/name whose UID is uid:
// the artifact server answers their URLs only with it. It is an HMAC of the object's directory
// and UID under a key only the controller holds, so no other namespace's URL can be derived from
// public names, and a URL dies with its object: another object of the same name has another
// UID, hence other URLs. An empty uid gives the token of an earlier release (which had none),
// accepted for a directory whose record names no UID yet (Bind).
func (s *Store) Token(namespace, name string, uid types.UID) string {
	return hex.EncodeToString(token(s.urlKey, namespace, name, uid))
}

func token(key []byte, namespace, name string, uid types.UID) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("kclartifact/" + namespace + "/" + name))
	if uid != "" {
		m.Write([]byte("/" + string(uid)))
	}
	return m.Sum(nil)
}

// ValidToken tells, in constant time, whether token is the one of the KCLArtifact namespace/name
// whose artifacts the store holds now: of the UID its directory's record names (the object that
// stored them, Bind), under the current key or the previous one. A deleted object's record is
// gone with its directory, and a new object of the same name records its own UID: the deleted
// one's URLs answer 404 for good.
func (s *Store) ValidToken(namespace, name, tok string) bool {
	got, err := hex.DecodeString(tok)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	var uid types.UID
	if rec := s.recordOf(s.LocalPath(meta.Artifact{Path: storage.ArtifactDir(kclv1.KCLArtifactKind, namespace, name)})); rec != nil {
		uid = rec.UID
	}
	ok := hmac.Equal(got, token(s.urlKey, namespace, name, uid))
	if prev := s.previousURLKey; prev != nil {
		ok = hmac.Equal(got, token(prev, namespace, name, uid)) || ok
	}
	return ok
}

// SetArtifactURL sets artifact's URL at the advertised address, with the token of obj, whose
// artifact it is: the URL kustomize-controller downloads (it sends the query as it is). Until
// Bind, a directory of an earlier release keeps that release's tokens, without UID.
func (s *Store) SetArtifactURL(obj client.Object, artifact *meta.Artifact) {
	s.Storage.SetArtifactURL(artifact)
	artifact.URL = s.withToken(obj, artifact.Path, artifact.URL)
}

// URL is the URL of file (an artifact, LatestName, NAME.yaml or "diff") of the KCLArtifact obj
// at the advertised address, with its token.
func (s *Store) URL(obj client.Object, file string) string {
	a := meta.Artifact{Path: Dir(obj) + "/" + file}
	s.SetArtifactURL(obj, &a)
	return a.URL
}

// tokenUID is the UID obj's tokens cover: its own, but none while its directory holds the record
// of an earlier release, not yet bound (Bind): the URLs the store gives out are always those the
// server answers.
func (s *Store) tokenUID(obj client.Object) types.UID {
	if rec := s.recordOf(s.LocalPath(meta.Artifact{Path: Dir(obj)})); rec != nil && rec.UID == "" {
		return ""
	}
	return obj.GetUID()
}

// withToken adds the token of obj to u, the URL of its artifact at path p.
func (s *Store) withToken(obj client.Object, p, u string) string {
	parts := strings.Split(strings.TrimLeft(p, "/"), "/")
	if len(parts) != 4 || parts[0] != "kclartifact" || u == "" ||
		parts[1] != obj.GetNamespace() || parts[2] != obj.GetName() {
		return u
	}
	parsed, err := url.Parse(u)
	if err != nil {
		return u
	}
	q := parsed.Query()
	q.Set(TokenParam, s.Token(parts[1], parts[2], s.tokenUID(obj)))
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
