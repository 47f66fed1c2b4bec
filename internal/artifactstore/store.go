// Package artifactstore keeps the rendered artifacts on disk with Flux's artifact storage: one
// deterministic tar.gz per distinct rendered content, a stable `latest.tar.gz` link to the current
// one (which the artifact server also shows as plain YAML), and garbage collection of old ones.
package artifactstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/artifact/config"
	"github.com/fluxcd/pkg/artifact/digest"
	"github.com/fluxcd/pkg/artifact/storage"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// LatestName is the link to the current artifact in each KCLArtifact's directory.
const LatestName = "latest.tar.gz"

// Store is the controller's artifact storage.
type Store struct {
	*storage.Storage

	mu sync.Mutex
	// verified holds the files whose digest was checked, with their size and time then: an
	// unchanged file is not hashed again at every reconciliation.
	verified map[string]fileStamp
	// collected is when each artifact directory was last garbage collected, and for which
	// current artifact.
	collected map[string]collection
}

type fileStamp struct {
	digest string
	size   int64
	mtime  time.Time
}

type collection struct {
	current string
	at      time.Time
}

// New opens the storage directory, creating it when needed. The digest algorithm of artifacts
// (--artifact-digest-algo) is process-wide in Flux's storage, so the last New sets it.
func New(opts *config.Options) (*Store, error) {
	if opts.ArtifactDigestAlgo != "" {
		algo, err := digest.AlgorithmForName(opts.ArtifactDigestAlgo)
		if err != nil {
			return nil, fmt.Errorf("--artifact-digest-algo: %w", err)
		}
		digest.Canonical = algo
	}
	if err := os.MkdirAll(opts.StoragePath, 0o755); err != nil {
		return nil, fmt.Errorf("creating storage directory: %w", err)
	}
	s, err := storage.New(opts)
	if err != nil {
		return nil, err
	}
	return &Store{Storage: s, verified: map[string]fileStamp{}, collected: map[string]collection{}}, nil
}

// Dir is where obj's artifacts live, relative to the storage root.
func Dir(obj client.Object) string {
	return storage.ArtifactDir(kclv1.KCLArtifactKind, obj.GetNamespace(), obj.GetName())
}

// Publish archives dir as obj's artifact. The file is named after the content, so the same
// rendered objects always give the same file and digest; revision is `<ref>@<digest>`. moved
// tells whether `latest` pointed elsewhere before: a controller reading a stale copy of its object
// renders and publishes the current artifact again, which is then not news.
func (s *Store) Publish(obj client.Object, ref, dir, contentFile string) (*meta.Artifact, bool, error) {
	content, err := os.ReadFile(filepath.Join(dir, contentFile))
	if err != nil {
		return nil, false, err
	}
	sum := sha256.Sum256(content)
	art := s.NewArtifactFor(kclv1.KCLArtifactKind, obj, "", hex.EncodeToString(sum[:])+".tar.gz")
	if err := s.MkdirAll(art); err != nil {
		return nil, false, fmt.Errorf("creating the artifact directory: %w", err)
	}
	unlock, err := s.Lock(art)
	if err != nil {
		return nil, false, fmt.Errorf("locking the artifact: %w", err)
	}
	defer unlock()
	if err := s.Archive(&art, dir, nil); err != nil {
		return nil, false, fmt.Errorf("archiving the artifact: %w", err)
	}
	art.Revision = ref + "@" + art.Digest
	local := s.LocalPath(art)
	before, _ := os.Readlink(filepath.Join(filepath.Dir(local), LatestName))
	if _, err := s.Symlink(art, LatestName); err != nil {
		return nil, false, fmt.Errorf("linking the latest artifact: %w", err)
	}
	return &art, before != local, nil
}

// Present tells whether the artifact file is in storage with the digest it claims. A file is
// hashed again only when its size or modification time changed since it was last verified.
func (s *Store) Present(a *meta.Artifact) bool {
	if a == nil {
		return false
	}
	p := s.LocalPath(*a)
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	stamp := fileStamp{digest: a.Digest, size: fi.Size(), mtime: fi.ModTime()}
	s.mu.Lock()
	known := s.verified[p] == stamp
	s.mu.Unlock()
	if known {
		return true
	}
	if s.VerifyArtifact(*a) != nil {
		return false
	}
	s.mu.Lock()
	s.verified[p] = stamp
	s.mu.Unlock()
	return true
}

// Collect removes old artifacts of the same object, keeping the current one and the retention
// the storage was configured with. It walks the directory only when the current artifact changed
// or the retention TTL went by since the last walk: nothing else can have become garbage.
func (s *Store) Collect(ctx context.Context, current meta.Artifact) ([]string, error) {
	dir := filepath.Dir(s.LocalPath(current))
	s.mu.Lock()
	last, ok := s.collected[dir]
	s.mu.Unlock()
	if ok && last.current == current.Path && time.Since(last.at) < s.ArtifactRetentionTTL {
		return nil, nil
	}
	deleted, err := s.GarbageCollect(ctx, current, 30*time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range deleted {
		delete(s.verified, p)
	}
	if err == nil {
		s.collected[dir] = collection{current: current.Path, at: time.Now()}
	}
	return deleted, err
}

// RemoveAll deletes every artifact of obj.
func (s *Store) RemoveAll(obj client.Object) error {
	dir := s.LocalPath(meta.Artifact{Path: Dir(obj)})
	if dir == "" {
		return fmt.Errorf("no storage directory for %s/%s", obj.GetNamespace(), obj.GetName())
	}
	s.mu.Lock()
	delete(s.collected, dir)
	for p := range s.verified {
		if strings.HasPrefix(p, dir+string(filepath.Separator)) {
			delete(s.verified, p)
		}
	}
	s.mu.Unlock()
	return os.RemoveAll(dir)
}
