package artifactstore

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
)

// The artifact written from memory is byte for byte the one Flux's storage archives from a
// directory: digests stay stable across the two, and across releases of this controller. An
// artifact with deploy phases holds one directory per phase.
func TestArchiveMatchesFluxStorage(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("apiVersion: v1\nkind: Secret\n---\n", 5000)
	for name, files := range map[string][][2]string{
		"empty":  {{"manifests.yaml", ""}},
		"small":  {{"manifests.yaml", "kind: ConfigMap\n"}},
		"large":  {{"manifests.yaml", big}},
		"phased": {{"main/manifests.yaml", "kind: Deployment\n"}, {"post/manifests.yaml", "kind: Job\n"}, {"pre/manifests.yaml", big}},
		"rollback": {{"main/manifests.yaml", "kind: Deployment\n"}, {"pre/manifests.yaml", "kind: Job\n"},
			{"rollback/post/manifests.yaml", ""}, {"rollback/pre/manifests.yaml", "kind: Job\n"}},
	} {
		want := fluxArchive(t, s, files)
		var entries []entry
		for _, f := range files {
			entries = append(entries, entry{f[0], strings.NewReader(f[1]), int64(len(f[1]))})
		}
		var got bytes.Buffer
		if err := writeTarGz(&got, entries...); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("%s: the archive differs from Flux storage's (%d bytes against %d)", name, got.Len(), len(want))
		}
	}
}

// fluxArchive is what Flux's Storage.Archive makes of a directory holding files (name, content).
func fluxArchive(t *testing.T, s *Store, files [][2]string) []byte {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f[0]))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f[1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	art := meta.Artifact{Path: "flux.tar.gz"}
	if err := s.MkdirAll(art); err != nil {
		t.Fatal(err)
	}
	if err := s.Archive(&art, dir, nil); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(s.LocalPath(art))
	if err != nil {
		t.Fatal(err)
	}
	return want
}
