package ui

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/tarball"
)

// archiveName is what the file name of a kept artifact looks like (<hex>.tar.gz); anything
// else in a URL is refused before it comes near the file system.
var archiveName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*\.tar\.gz$`)

// dirOf is the storage directory of obj's artifacts, when this instance has one.
func (h *handler) dirOf(obj *kclv1.KCLArtifact) (string, bool) {
	if !validName(obj.Namespace, obj.Name) {
		return "", false
	}
	dir, ok := h.resolve(artifactstore.Dir(obj))
	if !ok {
		return "", false
	}
	fi, err := os.Stat(dir)
	return dir, err == nil && fi.IsDir()
}

// resolve maps a path relative to the storage root to a real path inside it, following links
// only as long as they stay inside.
func (h *handler) resolve(rel string) (string, bool) {
	real, err := filepath.EvalSymlinks(filepath.Join(h.root, filepath.FromSlash(rel)))
	if err != nil {
		return "", false
	}
	r, err := filepath.Rel(h.root, real)
	if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) || filepath.IsAbs(r) {
		return "", false
	}
	return real, true
}

// openArchive opens the regular file of a kept artifact in obj's directory. With the artifact
// store (Options.Store), only bytes it verified to be those it wrote: never a link, nor a
// damaged or foreign file.
func (h *handler) openArchive(obj *kclv1.KCLArtifact, e kclv1.ArtifactHistoryEntry) (*os.File, os.FileInfo, error) {
	if e.Missing {
		// A file there may be another content (a digest mismatch): it is not shown as this one.
		return nil, nil, fmt.Errorf("artifact %s is missing from storage: its file is gone or no longer has its digest (storage on an emptyDir does not survive a restart)", e.Revision)
	}
	name := archiveFile(e)
	if !archiveName.MatchString(name) {
		return nil, nil, fmt.Errorf("artifact %s has no archive name in its URL %q", e.Revision, e.URL)
	}
	if h.store != nil {
		f, fi, err := h.store.Open(obj.Namespace, obj.Name, name)
		if err != nil {
			return nil, nil, fmt.Errorf("artifact %s is not shown: %w", e.Revision, err)
		}
		return f, fi, nil
	}
	if p, ok := h.resolve(path.Join(artifactstore.Dir(obj), name)); ok {
		if f, err := os.Open(p); err == nil {
			if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
				return f, fi, nil
			}
			f.Close()
		}
	}
	return nil, nil, fmt.Errorf("artifact %s is no longer stored", e.Revision)
}

// yamlCache reads each artifact a page needs once, though the page may show and compare it.
type yamlCache struct {
	h    *handler
	obj  *kclv1.KCLArtifact
	read map[string]yamlRead
	// sensitive are the values of the KCLArtifact's Secrets, masked wherever they appear
	sensitive []string
}

type yamlRead struct {
	data []byte
	err  error
}

func (h *handler) newYAMLCache(obj *kclv1.KCLArtifact) *yamlCache {
	return &yamlCache{h: h, obj: obj, read: map[string]yamlRead{}}
}

// get returns the YAML of a kept artifact, or an error meant for the page.
func (c *yamlCache) get(e kclv1.ArtifactHistoryEntry) ([]byte, error) {
	if r, ok := c.read[e.Digest]; ok {
		return r.data, r.err
	}
	data, err := c.load(e)
	c.read[e.Digest] = yamlRead{data, err}
	return data, err
}

func (c *yamlCache) load(e kclv1.ArtifactHistoryEntry) ([]byte, error) {
	f, _, err := c.h.openArchive(c.obj, e)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := tarball.ReadYAML(f, c.h.maxYAML)
	switch {
	case errors.Is(err, tarball.ErrTooLarge):
		return nil, fmt.Errorf("the YAML of artifact %s is larger than the %s this view shows or compares (%v); download its .tar.gz instead",
			e.Revision, humanBytes(c.h.maxYAML), err)
	case err != nil:
		c.h.log.Error(err, "reading an artifact", "kclartifact", c.obj.Namespace+"/"+c.obj.Name, "revision", e.Revision)
		return nil, fmt.Errorf("cannot read artifact %s", e.Revision)
	}
	return data, nil
}
