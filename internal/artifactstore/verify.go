package artifactstore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/artifact/digest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Why a stored artifact cannot be served or published. Errors of Open and Check wrap one of them.
var (
	// ErrMissing: no file, or none that the store wrote under that name.
	ErrMissing = errors.New("missing")
	// ErrDamaged: the file's bytes no longer have the digest the store recorded (flipped,
	// truncated or replaced), or not the digest asked for.
	ErrDamaged = errors.New("damaged")
	// ErrNotAFile: a link, a directory or a device where the file was, or a directory on the
	// way that is a link: never followed.
	ErrNotAFile = errors.New("not a regular file")
)

// fileStamp is what a file was when its digest was checked: the same size, modification time
// and inode since then mean the same bytes, and the file is not hashed again.
type fileStamp struct {
	digest string
	size   int64
	mtime  time.Time
	inode  uint64
}

func stampOf(fi os.FileInfo, d string) fileStamp {
	st := fileStamp{digest: d, size: fi.Size(), mtime: fi.ModTime()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.inode = uint64(sys.Ino)
	}
	return st
}

func (st fileStamp) same(fi os.FileInfo) bool {
	now := stampOf(fi, st.digest)
	return now == st
}

// FileName is the file an artifact URL names, without its query.
func FileName(artifactURL string) string {
	if u, err := url.Parse(artifactURL); err == nil {
		return path.Base(u.Path)
	}
	return path.Base(artifactURL)
}

// Open opens the artifact file of the KCLArtifact namespace/name for reading, once its bytes
// are known to have the digest the store recorded when it wrote it; file LatestName is the
// current one. The file is opened without following links, in a directory reached without
// following links, and checked through the open descriptor: what is read is what was verified.
func (s *Store) Open(namespace, name, file string) (*os.File, os.FileInfo, error) {
	if !objectName.MatchString(namespace) || !objectName.MatchString(name) || !archiveName.MatchString(file) {
		return nil, nil, fmt.Errorf("%s/%s/%s: %w", namespace, name, file, ErrMissing)
	}
	dir, err := s.objectDir(namespace, name)
	if err != nil {
		return nil, nil, err
	}
	rec := s.recordOf(dir)
	if file == LatestName {
		if rec == nil || rec.Current == "" {
			return nil, nil, fmt.Errorf("%s/%s has no current artifact: %w", namespace, name, ErrMissing)
		}
		file = rec.Current
	}
	want, ok := recordedFile{}, false
	if rec != nil {
		want, ok = rec.Files[file]
	}
	if !ok {
		return nil, nil, fmt.Errorf("%s: %w: the store holds no such artifact", file, ErrMissing)
	}
	return s.openVerified(filepath.Join(dir, file), file, want.Digest)
}

// objectDir is the directory of namespace/name, each of its parts a real directory, not a link.
func (s *Store) objectDir(namespace, name string) (string, error) {
	dir := s.BasePath
	for _, part := range []string{"kclartifact", namespace, name} {
		dir = filepath.Join(dir, part)
		fi, err := os.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s/%s: %w: no artifact directory", namespace, name, ErrMissing)
		}
		if err != nil {
			return "", err
		}
		if !fi.IsDir() {
			return "", fmt.Errorf("%s/%s: the artifact directory is %w", namespace, name, ErrNotAFile)
		}
	}
	return dir, nil
}

// openVerified opens p and checks its bytes against digest d.
func (s *Store) openVerified(p, file, d string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, fmt.Errorf("%s: %w: the file is gone", file, ErrMissing)
	case errors.Is(err, syscall.ELOOP):
		return nil, nil, fmt.Errorf("%s: %w: it is a link", file, ErrNotAFile)
	case err != nil:
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s: %w", file, ErrNotAFile)
	}
	if err == nil {
		err = s.verify(p, f, fi, file, d)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// verify hashes f, unless a file with the same stamp was verified with digest d before.
func (s *Store) verify(p string, f *os.File, fi os.FileInfo, file, d string) error {
	s.mu.Lock()
	stamp, ok := s.verified[p]
	s.mu.Unlock()
	if ok && stamp.digest == d && stamp.same(fi) {
		return nil
	}
	got, err := digestReader(f)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if got != d {
		return fmt.Errorf("%s: %w: digest mismatch, the bytes are no longer those of %s", file, ErrDamaged, d)
	}
	s.mu.Lock()
	s.verified[p] = stampOf(fi, d)
	s.mu.Unlock()
	return nil
}

func digestReader(r io.Reader) (string, error) {
	dg := digest.Canonical.Digester()
	if _, err := io.Copy(dg.Hash(), r); err != nil {
		return "", err
	}
	return dg.Digest().String(), nil
}

// digestOf hashes the regular file p, never following a link.
func digestOf(p string) (string, int64, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return "", 0, fmt.Errorf("%s: %w", p, ErrNotAFile)
	}
	d, err := digestReader(f)
	return d, fi.Size(), err
}

// Check tells whether art is in storage as the store wrote it, with art's digest: nil, or an
// error wrapping ErrMissing, ErrDamaged or ErrNotAFile that says what happened. art.Path must be
// an artifact of a KCLArtifact (kclartifact/<namespace>/<name>/<file>).
func (s *Store) Check(art meta.Artifact) error {
	parts := strings.Split(art.Path, "/")
	if len(parts) != 4 || parts[0] != "kclartifact" {
		return fmt.Errorf("%q is not a KCLArtifact's artifact: %w", art.Path, ErrMissing)
	}
	f, _, err := s.Open(parts[1], parts[2], parts[3])
	if err != nil {
		return err
	}
	f.Close()
	dir := filepath.Dir(s.LocalPath(art))
	if rec := s.recordOf(dir); rec == nil || rec.Files[parts[3]].Digest != art.Digest {
		return fmt.Errorf("%s: %w: the store holds it with another digest than %s", parts[3], ErrDamaged, art.Digest)
	}
	return nil
}

// ErrForeign: an artifact path of another object than the one asked for (a forged status).
var ErrForeign = errors.New("not this object's artifact")

// CheckFor is Check of an artifact that must be obj's: a path in another object's directory
// (another namespace's, say) is refused with ErrForeign before anything is read.
func (s *Store) CheckFor(obj client.Object, art meta.Artifact) error {
	if path.Dir(art.Path) != Dir(obj) {
		return fmt.Errorf("%s: %w %s/%s", art.Path, ErrForeign, obj.GetNamespace(), obj.GetName())
	}
	return s.Check(art)
}

// Current is obj's current artifact as the store recorded it when Point made it latest: its
// path, URL (with the token), digest and size, from the store's own record and never from a
// status; false when there is none. Its Revision is not recorded: it is empty.
func (s *Store) Current(obj client.Object) (meta.Artifact, bool) {
	dir := s.LocalPath(meta.Artifact{Path: Dir(obj)})
	rec := s.recordOf(dir)
	if rec == nil || rec.Current == "" {
		return meta.Artifact{}, false
	}
	return s.Recorded(obj, rec.Current)
}

// Recorded is the artifact file of obj as the store recorded it when it wrote it; false when
// the store did not write it (whatever the directory holds under that name).
func (s *Store) Recorded(obj client.Object, file string) (meta.Artifact, bool) {
	rec := s.recordOf(s.LocalPath(meta.Artifact{Path: Dir(obj)}))
	if rec == nil {
		return meta.Artifact{}, false
	}
	f, ok := rec.Files[file]
	if !ok {
		return meta.Artifact{}, false
	}
	a := meta.Artifact{Path: Dir(obj) + "/" + file, Digest: f.Digest, Size: &f.Size}
	s.SetArtifactURL(obj, &a)
	return a, true
}
