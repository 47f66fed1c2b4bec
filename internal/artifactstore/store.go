// Package artifactstore keeps the rendered artifacts on disk with Flux's artifact storage: one
// deterministic tar.gz per distinct rendered content, a stable `latest.tar.gz` link to the current
// one (which the artifact server also shows as plain YAML), and garbage collection of old ones.
// The store keeps its own record of what it wrote (record.go): files are served only as they were
// written (verify.go), at URLs that carry a token of their object (token.go).
package artifactstore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/artifact/config"
	"github.com/fluxcd/pkg/artifact/digest"
	"github.com/fluxcd/pkg/artifact/storage"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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
	// records are the store's own records of each artifact directory (record.go), by path.
	records map[string]*record
	// ledgers are the digests of the histories last recorded (ledger.go), by directory: an
	// unchanged history is not written again.
	ledgers map[string][sha256.Size]byte
	// urlKey signs the artifact URLs (token.go); the server also accepts previousURLKey's
	// tokens, when set (a rotation's grace period).
	urlKey, previousURLKey []byte
	// digestKey keys the digests readers see (digestkey.go), derived from urlKey.
	digestKey []byte
	// collected is when each artifact directory was last garbage collected, and for which
	// current artifact.
	collected map[string]collection
	// dirs serialises the writers of each artifact directory in this process. Flux's storage
	// takes a file lock per artifact; one process owns its storage path (shards have their
	// own), and on a slow disk the lock file was a tenth of a re-publish's file system time.
	dirs map[string]*sync.Mutex
	// now is the clock of retention (time.Now unless a test sets it).
	now func() time.Time
}

func (s *Store) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// collection is what Collect left in an artifact directory: the history it kept, and the files
// out of it that wait for the retention TTL, with when they were first seen out of it.
type collection struct {
	current string
	leaving map[string]time.Time
	next    time.Time // when the first of them may go; zero when none waits
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
	flux, err := storage.New(opts)
	if err != nil {
		return nil, err
	}
	s := &Store{Storage: flux, verified: map[string]fileStamp{}, collected: map[string]collection{},
		dirs: map[string]*sync.Mutex{}, records: map[string]*record{}, ledgers: map[string][sha256.Size]byte{}}
	if s.urlKey, err = loadOrCreateKey(filepath.Join(opts.StoragePath, KeyFileName)); err != nil {
		return nil, err
	}
	s.digestKey = deriveDigestKey(s.urlKey)
	// before anything is served: the latest links are put back from the records
	if err := s.restore(); err != nil {
		return nil, fmt.Errorf("restoring the artifact records: %w", err)
	}
	return s, nil
}

// Dir is where obj's artifacts live, relative to the storage root.
func Dir(obj client.Object) string {
	return storage.ArtifactDir(kclv1.KCLArtifactKind, obj.GetNamespace(), obj.GetName())
}

// dirOf is where obj's artifacts live, in the local file system; an error when obj names no
// directory of the storage.
func (s *Store) dirOf(obj client.Object) (string, error) {
	if dir := s.LocalPath(meta.Artifact{Path: Dir(obj)}); dir != "" {
		return dir, nil
	}
	return "", fmt.Errorf("no storage directory for %s/%s", obj.GetNamespace(), obj.GetName())
}

// File is one file of an artifact: a name (a path with slashes) and
// its content.
type File struct {
	Name    string
	Content *Content
}

// Publish stores content as obj's artifact, a tarball holding it as the file name. The file is
// named after the content, so the same rendered objects always give the same file and digest;
// revision is `<ref>@<digest>`. moved tells whether `latest` pointed elsewhere before: a
// controller reading a stale copy of its object renders and publishes the current artifact
// again, which is then not news.
func (s *Store) Publish(obj client.Object, ref, name string, content *Content) (*meta.Artifact, bool, error) {
	return s.PublishFiles(obj, ref, []File{{Name: name, Content: content}})
}

// PublishFiles is Publish for an artifact of several files, in name order.
func (s *Store) PublishFiles(obj client.Object, ref string, files []File) (*meta.Artifact, bool, error) {
	art, err := s.StoreFiles(obj, ref, files)
	if err != nil {
		return nil, false, err
	}
	moved, err := s.Point(*art)
	if err != nil {
		return nil, false, err
	}
	return art, moved, nil
}

// StoreFiles stores the artifact of files as PublishFiles does, without making it obj's latest.
func (s *Store) StoreFiles(obj client.Object, ref string, files []File) (*meta.Artifact, error) {
	art := s.NewArtifactFor(kclv1.KCLArtifactKind, obj, "", filesSum(files)+".tar.gz")
	local := s.LocalPath(art)
	if local == "" {
		return nil, fmt.Errorf("invalid artifact path %q", art.Path)
	}
	defer s.lock(filepath.Dir(local))()
	if err := s.bind(filepath.Dir(local), obj.GetUID(), true); err != nil {
		return nil, err
	}
	if err := s.write(&art, local, files); err != nil {
		return nil, fmt.Errorf("archiving the artifact: %w", err)
	}
	art.Revision = ref + "@" + art.Digest
	s.SetArtifactURL(obj, &art)
	return &art, nil
}

// filesSum names an artifact after its files: one file's content hash (the name artifacts of
// one file have always had), or a hash of the names and content hashes of several.
func filesSum(files []File) string {
	if len(files) == 1 {
		return files[0].Content.hexSum()
	}
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%s\n", f.Name, f.Content.hexSum())
	}
	return hex.EncodeToString(h.Sum(nil))
}

// LocalPath is where art is on disk, "" for a path that would leave the storage. Flux's storage
// resolves every path component for symlinks (SecureJoin); nothing but this controller writes
// here and it creates no symlink but the latest link, so a lexical check is the same guarantee
// without a handful of lstat calls per use.
func (s *Store) LocalPath(art meta.Artifact) string {
	if art.Path == "" || !filepath.IsLocal(filepath.FromSlash(art.Path)) {
		return ""
	}
	return filepath.Join(s.BasePath, filepath.FromSlash(art.Path))
}

// lock holds dir for one writer and returns its release.
func (s *Store) lock(dir string) func() {
	s.mu.Lock()
	m, ok := s.dirs[dir]
	if !ok {
		m = &sync.Mutex{}
		s.dirs[dir] = m
	}
	s.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// write archives content into the file local of art, atomically, and sets art's digest, size
// and time. A file already there with this name and a digest verified since it last changed
// holds these very bytes (the name is the content's hash and archiving is deterministic): it is
// kept as it is.
func (s *Store) write(art *meta.Artifact, local string, files []File) error {
	dir, name := filepath.Dir(local), filepath.Base(local)
	if stamp, ok := s.verifiedStamp(local); ok {
		if rec := s.recordOf(dir); rec != nil && rec.Files[name] == (recordedFile{Digest: stamp.digest, Size: stamp.size}) {
			art.Digest, art.Size, art.LastUpdateTime = stamp.digest, ptr.To(stamp.size), metav1.Now()
			return nil
		}
	}
	entries := make([]entry, 0, len(files))
	for _, f := range files {
		r, err := f.Content.reader()
		if err != nil {
			return err
		}
		entries = append(entries, entry{name: f.Name, r: r, size: f.Content.Size()})
	}
	d := digest.Canonical.Digester()
	var size int64
	fi, err := replaceFile(local, 0o600, func(w io.Writer) error {
		counted := &countingWriter{w: io.MultiWriter(w, d.Hash())}
		err := writeTarGz(counted, entries...)
		size = counted.n
		return err
	})
	if err != nil {
		return err
	}
	art.Digest = d.Digest().String()
	art.Size, art.LastUpdateTime = ptr.To(size), metav1.Now()
	s.mu.Lock()
	s.verified[local] = stampOf(fi, art.Digest)
	s.mu.Unlock()
	return s.updateRecord(dir, func(r *record) { r.Files[name] = recordedFile{Digest: art.Digest, Size: size} })
}

// replaceFile writes a new file at p through a temporary file renamed over it, creating the
// directory the first time; it returns what the new file is.
func replaceFile(p string, mode os.FileMode, fill func(io.Writer) error) (os.FileInfo, error) {
	tmp, err := os.CreateTemp(filepath.Dir(p), filepath.Base(p)+".tmp-")
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(filepath.Dir(p), 0o700); err == nil {
			tmp, err = os.CreateTemp(filepath.Dir(p), filepath.Base(p)+".tmp-")
		}
	}
	if err != nil {
		return nil, err
	}
	err = fill(tmp)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	var fi os.FileInfo
	if err == nil {
		fi, err = tmp.Stat()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return nil, err
	}
	return fi, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Present tells whether the artifact file is in storage as the store wrote it, with the digest
// it claims (Check says why not). A file is hashed again only when its size, modification time
// or inode changed since it was last verified.
func (s *Store) Present(a *meta.Artifact) bool {
	return a != nil && s.Check(*a) == nil
}

// verifiedStamp is what was verified of the file at p, as long as the file has not changed since.
func (s *Store) verifiedStamp(p string) (fileStamp, bool) {
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return fileStamp{}, false
	}
	s.mu.Lock()
	stamp, ok := s.verified[p]
	s.mu.Unlock()
	return stamp, ok && stamp.same(fi)
}

// Collect removes the files of obj's directory that status.history no longer lists (the latest
// link excepted) once they have been out of it for the retention TTL (--artifact-retention-ttl):
// a client that read an artifact's URL just before a new one was published still downloads it.
// next is when the first file still waiting may go (zero when none waits): the caller comes back
// then. A history seen before with no file due costs no directory walk.
func (s *Store) Collect(obj client.Object, history []kclv1.ArtifactHistoryEntry) (deleted []string, next time.Time, err error) {
	dir := s.LocalPath(meta.Artifact{Path: Dir(obj)})
	keep := map[string]bool{LatestName: true, recordName: true, ledgerName: true}
	names := make([]string, 0, len(history))
	for _, h := range history {
		name := FileName(h.URL)
		keep[name] = true
		names = append(names, name)
	}
	stamp := strings.Join(names, ",")
	defer s.lock(dir)()
	now := s.clock()
	s.mu.Lock()
	last, ok := s.collected[dir]
	s.mu.Unlock()
	if ok && last.current == stamp && (last.next.IsZero() || now.Before(last.next)) {
		return nil, last.next, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		// nothing stored yet (a stage whose first artifact waits): nothing to collect
		return nil, time.Time{}, nil
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	c := collection{current: stamp, leaving: map[string]time.Time{}}
	var due []string
	for _, e := range entries {
		if e.IsDir() || keep[e.Name()] {
			continue
		}
		since, seen := last.leaving[e.Name()]
		if !seen {
			since = now
		}
		if until := since.Add(s.ArtifactRetentionTTL); now.Before(until) {
			c.leaving[e.Name()] = since
			if c.next.IsZero() || until.Before(c.next) {
				c.next = until
			}
			continue
		}
		due = append(due, e.Name())
	}
	deleted, err = removeAllBut(dir, due, keep)
	if rerr := s.updateRecord(dir, func(r *record) {
		for _, p := range deleted {
			delete(r.Files, filepath.Base(p))
		}
	}); err == nil {
		err = rerr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range deleted {
		delete(s.verified, p)
	}
	if err == nil {
		s.collected[dir] = c
	}
	return deleted, c.next, err
}

// removeAllBut removes the files of dir named in candidates and not in keep.
func removeAllBut(dir string, candidates []string, keep map[string]bool) ([]string, error) {
	var deleted []string
	for _, name := range candidates {
		if keep[name] {
			continue
		}
		p := filepath.Join(dir, name)
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return deleted, err
		} else if err == nil {
			deleted = append(deleted, p)
		}
	}
	return deleted, nil
}

// ArtifactOf is the stored artifact a history entry names, for publishing it again.
func (s *Store) ArtifactOf(obj client.Object, h kclv1.ArtifactHistoryEntry) meta.Artifact {
	a := s.NewArtifactFor(kclv1.KCLArtifactKind, obj, h.Revision, FileName(h.URL))
	a.Digest, a.Size, a.LastUpdateTime = h.Digest, h.Size, h.LastPublished
	s.SetArtifactURL(obj, &a)
	return a
}

// Point makes art obj's latest artifact; moved tells whether it was not already. The store's
// record says so first: the link, named by the file's name in its own directory, follows it.
func (s *Store) Point(art meta.Artifact) (bool, error) {
	local := s.LocalPath(art)
	if local == "" {
		return false, fmt.Errorf("invalid artifact path %q", art.Path)
	}
	dir, name := filepath.Dir(local), filepath.Base(local)
	defer s.lock(dir)()
	before := s.recordOf(dir)
	if before == nil || before.Files[name].Digest == "" {
		return false, fmt.Errorf("%s: %w: the store did not write it", art.Path, ErrMissing)
	}
	if err := s.updateRecord(dir, func(r *record) { r.Current = name }); err != nil {
		return false, err
	}
	if target, _ := os.Readlink(filepath.Join(dir, LatestName)); target != name {
		if err := replaceLink(filepath.Join(dir, LatestName), name); err != nil {
			return false, err
		}
	}
	return before.Current != name, nil
}

// Bind makes obj the owner of its artifact directory, whose URLs the server answers with obj's
// tokens only (they cover its UID, token.go): the record of an earlier release, which names no
// UID, takes obj's, and the URLs of that release (tokens without UID) stop working; a directory
// left by a deleted object of the same name (whose finalizer did not run) is emptied, its
// artifacts never served at the new object's URLs. An object with nothing stored has nothing to
// bind: StoreFiles binds when it stores. The reconciler binds before it publishes any URL.
func (s *Store) Bind(obj client.Object) error {
	dir, err := s.dirOf(obj)
	if err != nil {
		return err
	}
	defer s.lock(dir)()
	return s.bind(dir, obj.GetUID(), false)
}

// DropForeign empties obj's artifact directory when it holds another object's artifacts: those
// of a deleted object of the same name whose finalizer did not run. The reconciler calls it first,
// so that nothing of that object (a history entry naming its files, forged or left in status) is
// checked, pinned or published as obj's. A record of an earlier release (no UID) is left to Bind.
func (s *Store) DropForeign(obj client.Object) error {
	dir, err := s.dirOf(obj)
	if err != nil {
		return err
	}
	defer s.lock(dir)()
	if rec := s.recordOf(dir); rec == nil || rec.UID == "" || obj.GetUID() == "" || rec.UID == obj.GetUID() {
		return nil
	}
	return s.bind(dir, obj.GetUID(), false)
}

// bind records uid as dir's owner, emptying the directory of another UID's artifacts; create
// records it in a directory without a record. The caller holds the directory's lock.
func (s *Store) bind(dir string, uid types.UID, create bool) error {
	rec := s.recordOf(dir)
	if uid == "" || (rec == nil && !create) || (rec != nil && rec.UID == uid) {
		return nil
	}
	if rec != nil && rec.UID != "" {
		s.forget(dir)
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing the artifacts of a deleted object of the same name: %w", err)
		}
	}
	return s.updateRecord(dir, func(r *record) { r.UID = uid })
}

// RemoveAll deletes every artifact of obj; the artifacts of another object of the same name
// (another UID: a new object, when the finalizer of a deleted one runs late) are left.
func (s *Store) RemoveAll(obj client.Object) error {
	dir, err := s.dirOf(obj)
	if err != nil {
		return err
	}
	if rec := s.recordOf(dir); rec != nil && rec.UID != "" && obj.GetUID() != "" && rec.UID != obj.GetUID() {
		return nil
	}
	s.forget(dir)
	s.mu.Lock()
	delete(s.dirs, dir)
	s.mu.Unlock()
	return os.RemoveAll(dir)
}

// forget drops what the store knows of dir's files.
func (s *Store) forget(dir string) {
	s.mu.Lock()
	delete(s.collected, dir)
	delete(s.records, dir)
	delete(s.ledgers, dir)
	for p := range s.verified {
		if strings.HasPrefix(p, dir+string(filepath.Separator)) {
			delete(s.verified, p)
		}
	}
	s.mu.Unlock()
}
