package artifactstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DigestKeyFileName is the file in the storage directory holding the key of the digests a reader
// sees (Keyed), created at the first start beside the URL key. It lives and dies with the
// storage: lost, every digest changes once and every KCLArtifact renders again, which a lost
// storage makes it do anyway. It is not the URL key, so that rotating that key (every URL
// changes) renders and publishes nothing again.
const DigestKeyFileName = ".digest-key"

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
