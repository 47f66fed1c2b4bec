package nodeimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// layerTar writes the entries as an uncompressed layer tarball. Everything that could differ from
// one build to the next is fixed, so the same entries give the same bytes: entries are sorted by
// path (a parent before its children), a path given twice keeps its last entry, missing parent
// directories are added (0755, root), every mtime is epoch, and no user or group names are written.
func layerTar(entries []Entry, epoch time.Time) ([]byte, error) {
	byPath := withParents(entries)
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range paths {
		if err := writeEntry(tw, byPath[p], epoch); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// withParents indexes the entries by clean path (the last of duplicates wins, so a spec can
// override what a package listed, e.g. the mode of /tmp) and adds the directories above them.
func withParents(entries []Entry) map[string]Entry {
	byPath := make(map[string]Entry, len(entries))
	for _, e := range entries {
		e.Path = path.Clean("/" + e.Path)
		if e.Path != "/" {
			byPath[e.Path] = e
		}
	}
	for p := range byPath {
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			if _, ok := byPath[dir]; !ok {
				byPath[dir] = Dir(dir, 0o755, 0, 0)
			}
		}
	}
	return byPath
}

func writeEntry(tw *tar.Writer, e Entry, epoch time.Time) error {
	hdr := &tar.Header{
		Name:     strings.TrimPrefix(e.Path, "/"),
		Typeflag: e.Type,
		Mode:     e.Mode,
		Uid:      e.UID,
		Gid:      e.GID,
		ModTime:  epoch,
		Linkname: e.Link,
	}
	var data []byte
	switch e.Type {
	case tar.TypeDir:
		hdr.Name += "/"
	case tar.TypeSymlink:
	case tar.TypeReg:
		var err error
		if data, err = entryData(e); err != nil {
			return err
		}
		hdr.Size = int64(len(data))
	default:
		return fmt.Errorf("%s: unsupported entry type %q", e.Path, e.Type)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("%s: %w", e.Path, err)
	}
	_, err := tw.Write(data)
	return err
}

func entryData(e Entry) ([]byte, error) {
	if e.Source == "" {
		return e.Data, nil
	}
	return os.ReadFile(e.Source)
}
