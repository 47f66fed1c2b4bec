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
	return &Store{Storage: s}, nil
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

// Present tells whether the artifact file is in storage with the digest it claims.
func (s *Store) Present(a *meta.Artifact) bool {
	return a != nil && s.ArtifactExist(*a) && s.VerifyArtifact(*a) == nil
}

// Collect removes old artifacts of the same object, keeping the current one and the retention
// the storage was configured with.
func (s *Store) Collect(ctx context.Context, current meta.Artifact) ([]string, error) {
	return s.GarbageCollect(ctx, current, 30*time.Second)
}

// RemoveAll deletes every artifact of obj.
func (s *Store) RemoveAll(obj client.Object) error {
	dir := s.LocalPath(meta.Artifact{Path: Dir(obj)})
	if dir == "" {
		return fmt.Errorf("no storage directory for %s/%s", obj.GetNamespace(), obj.GetName())
	}
	return os.RemoveAll(dir)
}
