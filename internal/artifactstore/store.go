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

// New opens the storage directory, creating it when needed.
func New(opts *config.Options) (*Store, error) {
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
// rendered objects always give the same file and digest; revision is `<ref>@<digest>`.
func (s *Store) Publish(obj client.Object, ref, dir, contentFile string) (*meta.Artifact, error) {
	content, err := os.ReadFile(filepath.Join(dir, contentFile))
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(content)
	a := s.NewArtifactFor(kclv1.KCLArtifactKind, obj, "", hex.EncodeToString(sum[:])+".tar.gz")
	if err := s.MkdirAll(a); err != nil {
		return nil, fmt.Errorf("creating the artifact directory: %w", err)
	}
	unlock, err := s.Lock(a)
	if err != nil {
		return nil, fmt.Errorf("locking the artifact: %w", err)
	}
	defer unlock()
	if err := s.Archive(&a, dir, nil); err != nil {
		return nil, fmt.Errorf("archiving the artifact: %w", err)
	}
	a.Revision = ref + "@" + a.Digest
	if _, err := s.Symlink(a, LatestName); err != nil {
		return nil, fmt.Errorf("linking the latest artifact: %w", err)
	}
	return &a, nil
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
