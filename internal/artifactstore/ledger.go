package artifactstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/fluxcd/pkg/apis/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// ledgerName is the store's copy of an object's history as the controller last computed it:
// which artifacts it published, from which inputs, and what health it saw them reach. A tenant
// who administers a namespace can write the status subresource, so status.history is a copy for
// readers; what gates a promotion, and what a reconcile starts from, is read here. The releases
// an object rejects, as the controller resolved them, are kept beside the history: what counts as
// rejected in a pipeline is read here too, never from a status. Its name starts
// with a dot: no URL the server answers can name it, and Collect keeps it.
const ledgerName = ".history.json"

// ledger is one object's recorded history and rejections, bound to the object's UID: an object
// deleted and created again under the same name starts with none.
type ledger struct {
	UID      string                       `json:"uid"`
	History  []kclv1.ArtifactHistoryEntry `json:"history"`
	Rejected []kclv1.RejectedRelease      `json:"rejected,omitempty"`
}

// read is obj's ledger; recorded is false when nothing is recorded for this object (a new
// object, an object of an earlier release, or a lost volume).
func (s *Store) read(obj client.Object) (l ledger, recorded bool, err error) {
	dir, err := s.dirOf(obj)
	if err != nil {
		return ledger{}, false, err
	}
	b, err := os.ReadFile(filepath.Join(dir, ledgerName))
	if errors.Is(err, fs.ErrNotExist) {
		return ledger{}, false, nil
	}
	if err != nil {
		return ledger{}, false, fmt.Errorf("reading the recorded history: %w", err)
	}
	if err := json.Unmarshal(b, &l); err != nil || l.UID != string(obj.GetUID()) {
		// damaged, or another object's of the same name: nothing is known
		return ledger{}, false, nil
	}
	return l, true, nil
}

// History is obj's history as the controller last recorded it. recorded is false when nothing is
// recorded for this object (a new object, an object of an earlier release, or a lost volume).
func (s *Store) History(obj client.Object) (history []kclv1.ArtifactHistoryEntry, recorded bool, err error) {
	l, recorded, err := s.read(obj)
	return l.History, recorded, err
}

// Rejections are the releases obj rejects as the controller last resolved them (status.rejected
// is their copy); recorded is false when nothing is recorded for this object, as for History.
func (s *Store) Rejections(obj client.Object) (rejected []kclv1.RejectedRelease, recorded bool, err error) {
	l, recorded, err := s.read(obj)
	return l.Rejected, recorded, err
}

// HasArtifacts tells whether the store holds files it wrote for obj: an object it published for
// before it kept a ledger (an upgrade), as opposed to a new one.
func (s *Store) HasArtifacts(obj client.Object) bool {
	rec := s.recordOf(s.LocalPath(meta.Artifact{Path: Dir(obj)}))
	return rec != nil && len(rec.Files) > 0
}

// RecordHistory records obj's history and the releases it rejects; a record equal to the one
// recorded last is not written again.
func (s *Store) RecordHistory(obj client.Object, history []kclv1.ArtifactHistoryEntry, rejected []kclv1.RejectedRelease) error {
	dir, err := s.dirOf(obj)
	if err != nil {
		return err
	}
	b, err := json.Marshal(ledger{UID: string(obj.GetUID()), History: history, Rejected: rejected})
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	defer s.lock(dir)()
	s.mu.Lock()
	last, known := s.ledgers[dir]
	s.mu.Unlock()
	if last == sum {
		return nil
	}
	if !known {
		// the first record since the start: what is on disk may be it already
		on, err := os.ReadFile(filepath.Join(dir, ledgerName))
		switch {
		case err == nil && bytes.Equal(on, b):
			s.remember(dir, sum)
			return nil
		case errors.Is(err, fs.ErrNotExist) && len(history) == 0 && len(rejected) == 0:
			return nil // nothing to record, nothing recorded
		}
	}
	if _, err := replaceFile(filepath.Join(dir, ledgerName), 0o600, func(w io.Writer) error {
		_, err := io.Copy(w, bytes.NewReader(b))
		return err
	}); err != nil {
		return fmt.Errorf("recording the history: %w", err)
	}
	s.remember(dir, sum)
	return nil
}

func (s *Store) remember(dir string, sum [sha256.Size]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ledgers[dir] = sum
}
