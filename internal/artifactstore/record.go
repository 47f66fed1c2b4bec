package artifactstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"

	"k8s.io/apimachinery/pkg/types"
)

// recordName is the store's own record of an artifact directory: which files it wrote there,
// with their digests, and which one is current. What the artifact server serves and what
// `latest` names come from it, never from a link or a status found on disk or in the cluster.
// Its name starts with a dot: no URL the server answers can name it.
const recordName = ".artifacts.json"

// record is one directory's record. It is replaced, never changed in place: readers hold it
// without a lock.
type record struct {
	// UID is the KCLArtifact whose artifacts the directory holds (Bind): the server accepts the
	// tokens of its URLs only. Empty in the record of an earlier release, until the object's next
	// reconcile binds it; until then the server accepts the tokens of that release, without UID.
	UID     types.UID               `json:"uid,omitempty"`
	Current string                  `json:"current,omitempty"`
	Files   map[string]recordedFile `json:"files"`
}

type recordedFile struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	// Adopted marks a file found in a directory that had no record yet (storage written by an
	// earlier release): its digest is what it held then, not what the store wrote.
	Adopted bool `json:"adopted,omitempty"`
}

func (r *record) with(update func(*record)) *record {
	n := &record{Files: map[string]recordedFile{}}
	if r != nil {
		n.UID, n.Current = r.UID, r.Current
		maps.Copy(n.Files, r.Files)
	}
	update(n)
	return n
}

func (r *record) equal(o *record) bool {
	return r != nil && o != nil && r.UID == o.UID && r.Current == o.Current && maps.Equal(r.Files, o.Files)
}

// recordOf is the record of dir, nil when it has none.
func (s *Store) recordOf(dir string) *record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records[dir]
}

// updateRecord changes the record of dir and writes it when it changed; the caller holds the
// directory's lock.
func (s *Store) updateRecord(dir string, update func(*record)) error {
	old := s.recordOf(dir)
	n := old.with(update)
	if n.equal(old) {
		return nil
	}
	b, err := json.Marshal(n)
	if err != nil {
		return err
	}
	if _, err := replaceFile(filepath.Join(dir, recordName), 0o600, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}); err != nil {
		return fmt.Errorf("writing the artifact record: %w", err)
	}
	s.mu.Lock()
	s.records[dir] = n
	s.mu.Unlock()
	return nil
}

// archiveName is what the file of an artifact is called; anything else is never served.
var archiveName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*\.tar\.gz$`)

// objectName is a namespace or object name as Kubernetes allows them.
var objectName = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$`)

// restore reads the record of every artifact directory and puts each latest link back to the
// current artifact it names, before anything is served: a link found on disk is not trusted. A
// directory without a record (an earlier release's) is recorded as found, its links only
// within the directory.
func (s *Store) restore() error {
	base := filepath.Join(s.BasePath, "kclartifact")
	namespaces, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, ns := range namespaces {
		if !ns.IsDir() {
			continue
		}
		objs, err := os.ReadDir(filepath.Join(base, ns.Name()))
		if err != nil {
			return err
		}
		for _, o := range objs {
			if o.IsDir() {
				// A directory that cannot be restored keeps no record: nothing of it is served
				// until the controller stores its artifact again, which writes one. One odd
				// directory does not keep the controller from starting.
				_ = s.restoreDir(filepath.Join(base, ns.Name(), o.Name()))
			}
		}
	}
	return nil
}

func (s *Store) restoreDir(dir string) error {
	r, err := readRecord(dir)
	if err != nil {
		return err
	}
	if r == nil {
		if err := s.adopt(dir); err != nil {
			return err
		}
	} else {
		s.mu.Lock()
		s.records[dir] = r
		s.mu.Unlock()
	}
	return s.relink(dir)
}

func readRecord(dir string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(dir, recordName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r := &record{}
	if err := json.Unmarshal(b, r); err != nil {
		// a damaged record: nothing in the directory is known, the controller stores again
		return &record{Files: map[string]recordedFile{}}, nil
	}
	if r.Files == nil {
		r.Files = map[string]recordedFile{}
	}
	return r, nil
}

// adopt records the regular files of a directory an earlier release wrote, with the digest each
// has now, and the file its latest link names when that is one of them.
func (s *Store) adopt(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	found := map[string]recordedFile{}
	for _, e := range entries {
		if !e.Type().IsRegular() || !archiveName.MatchString(e.Name()) || e.Name() == LatestName {
			continue
		}
		d, size, err := digestOf(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		found[e.Name()] = recordedFile{Digest: d, Size: size, Adopted: true}
	}
	current := ""
	if target, err := os.Readlink(filepath.Join(dir, LatestName)); err == nil {
		name := filepath.Base(target)
		if _, ok := found[name]; ok && (target == name || filepath.Dir(target) == dir) {
			current = name
		}
	}
	return s.updateRecord(dir, func(r *record) { r.Current, r.Files = current, found })
}

// relink makes dir's latest link name the recorded current file, by its name in the directory,
// or removes the link when nothing is current.
func (s *Store) relink(dir string) error {
	r := s.recordOf(dir)
	link := filepath.Join(dir, LatestName)
	if r == nil || r.Current == "" {
		if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if target, err := os.Readlink(link); err == nil && target == r.Current {
		return nil
	}
	return replaceLink(link, r.Current)
}

// replaceLink points link at target atomically.
func replaceLink(link, target string) error {
	tmp := link + ".tmp"
	_ = os.Remove(tmp) // left by a crash between the two calls below
	err := os.Symlink(target, tmp)
	if err == nil {
		err = os.Rename(tmp, link)
	}
	if err != nil {
		return fmt.Errorf("linking the latest artifact: %w", err)
	}
	return nil
}
