package artifactstore

import (
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	"github.com/fluxcd/pkg/artifact/digest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
)

// Restore puts back in storage the artifact a history entry of obj names, from a copy of its
// tarball found elsewhere (the OCI repository it was pushed to, after the storage was lost).
// The copy is written under the entry's file name only if it has the entry's digest, and
// anything else is refused and leaves nothing behind. That the entry is one this store wrote is
// the caller's to prove (the controller checks the copy's signed provenance).
func (s *Store) Restore(obj client.Object, e kclv1.ArtifactHistoryEntry, copyPath string) error {
	art := s.ArtifactOf(obj, e)
	local := s.LocalPath(art)
	if local == "" || path.Dir(art.Path) != Dir(obj) {
		return fmt.Errorf("invalid artifact path %q", art.Path)
	}
	src, err := os.Open(copyPath)
	if err != nil {
		return err
	}
	defer src.Close()
	dir, name := filepath.Dir(local), filepath.Base(local)
	defer s.lock(dir)()
	if err := s.bind(dir, obj.GetUID(), true); err != nil {
		return err
	}
	d := digest.Canonical.Digester()
	var size int64
	tmp := local + ".restore"
	fi, err := replaceFile(tmp, 0o600, func(w io.Writer) error {
		n, err := io.Copy(io.MultiWriter(w, d.Hash()), src)
		size = n
		return err
	})
	if err != nil {
		return err
	}
	if got := d.Digest().String(); got != e.Digest {
		os.Remove(tmp)
		return fmt.Errorf("the copy of %s has digest %s: refused", e.Digest, got)
	}
	if err := os.Rename(tmp, local); err != nil {
		os.Remove(tmp)
		return err
	}
	s.mu.Lock()
	s.verified[local] = stampOf(fi, e.Digest)
	s.mu.Unlock()
	// Adopted: the store did not write these bytes itself this time, so a render that names the
	// same file writes it again rather than trusting the name (write's shortcut)
	return s.updateRecord(dir, func(r *record) { r.Files[name] = recordedFile{Digest: e.Digest, Size: size, Adopted: true} })
}
