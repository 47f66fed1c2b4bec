package artifactstore

import (
	"os"
	"path"

	"github.com/fluxcd/pkg/apis/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/tarball"
)

// MissingHint says why kept artifacts go missing, for the messages that say they did.
const MissingHint = " (storage on an emptyDir does not survive the controller's Pod: see config/persistent-storage)"

// Holds tells whether art is one of obj's artifacts, in storage with the digest it claims.
func (s *Store) Holds(obj client.Object, art *meta.Artifact) bool {
	return art != nil && s.CheckFor(obj, *art) == nil
}

// Keeps tells whether the artifact a history entry of obj names is still stored.
func (s *Store) Keeps(obj client.Object, e kclv1.ArtifactHistoryEntry) bool {
	a := s.ArtifactOf(obj, e)
	return s.Holds(obj, &a)
}

// OpenFor opens one of obj's artifacts once its digest is checked, without following links: a
// damaged or replaced file is never read.
func (s *Store) OpenFor(obj client.Object, art meta.Artifact) (*os.File, error) {
	if err := s.CheckFor(obj, art); err != nil {
		return nil, err
	}
	f, _, err := s.Open(obj.GetNamespace(), obj.GetName(), path.Base(art.Path))
	return f, err
}

// ReadYAMLFor reads the YAML of one of obj's artifacts, at most limit bytes of it.
func (s *Store) ReadYAMLFor(obj client.Object, art meta.Artifact, limit int64) ([]byte, error) {
	f, err := s.OpenFor(obj, art)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return tarball.ReadYAML(f, limit)
}
