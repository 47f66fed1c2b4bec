package artifactstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// digestKeyLabel derives the key of the digests a reader sees (Keyed) from the URL key: the two
// are never used for one another's purpose, and whatever keeps the URL key keeps the digests.
// Replicas given the URL key from one Secret (--storage-url-key-file) compute the same digests,
// so a failover renders the same artifacts; a restart that keeps the storage (or the key file)
// renders nothing again. A new URL key (a rotation, a lost emptyDir) changes every digest once:
// every KCLArtifact renders again, and one that reads Secrets publishes its objects as a new
// artifact, with a new salt.
const digestKeyLabel = "kcl-artifact-controller digest key v1"

// deriveDigestKey is the digest key of urlKey.
func deriveDigestKey(urlKey []byte) []byte {
	m := hmac.New(sha256.New, urlKey)
	m.Write([]byte(digestKeyLabel))
	return m.Sum(nil)
}

// KeyedPrefix starts a keyed digest: an HMAC-SHA256, not a hash anyone can compute.
const KeyedPrefix = "hmac-sha256:"

// Keyed is the HMAC-SHA256, under a key only the controller holds, of purpose and parts: a digest
// that changes when any part changes, is the same across restarts that keep the storage, and
// tells a reader nothing of what it covers (issue 54: a viewer who knows every other input could
// brute-force a Secret value from an unkeyed hash in milliseconds). Purposes keep the digests of
// different uses apart.
func (s *Store) Keyed(purpose string, parts ...string) string {
	m := hmac.New(sha256.New, s.digestKey)
	m.Write([]byte(purpose))
	for _, p := range parts {
		m.Write([]byte{0})
		m.Write([]byte(p))
	}
	return KeyedPrefix + hex.EncodeToString(m.Sum(nil))
}

// SaltName is the file Salted adds to an artifact. It is no YAML: kustomize-controller, the YAML
// views and the diffs read none of it.
const SaltName = ".digest-salt"

// Salted returns files with one more: SaltName, holding a keyed digest of obj's directory and
// of the files. The artifact's file name, digest and revision (in status, the history, the
// ExternalArtifact, the Kustomization) are then hashes of content no reader can compute, even
// one who could render the program with every guess of a Secret it reads; the same files still
// give the same artifact.
func (s *Store) Salted(obj client.Object, files []File) []File {
	salt := NewContent()
	_, _ = salt.Write([]byte(s.Keyed("artifact-salt", obj.GetNamespace()+"/"+obj.GetName(), filesSum(files)) + "\n"))
	out := append(append(make([]File, 0, len(files)+1), files...), File{Name: SaltName, Content: salt})
	sort.SliceStable(out, func(i, j int) bool { return strings.Compare(out[i].Name, out[j].Name) < 0 })
	return out
}
