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
// directory: digests stay stable across the two, and across releases of this controller.
func TestArchiveMatchesFluxStorage(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"", "kind: ConfigMap\n", strings.Repeat("apiVersion: v1\nkind: Secret\n---\n", 5000)} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "manifests.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
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
		var got bytes.Buffer
		if err := writeTarGz(&got, entry{"manifests.yaml", strings.NewReader(content), int64(len(content))}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("%d bytes of content: the archive differs from Flux storage's (%d bytes against %d)", len(content), got.Len(), len(want))
		}
	}
}

// An artifact with deploy phases holds one directory per phase: Flux's archive of that tree and
// this one must be the same bytes too.
func TestPhasedArchiveMatchesFluxStorage(t *testing.T) {
	s, err := newStore(t, "sha256")
	if err != nil {
		t.Fatal(err)
	}
	files := []struct{ name, content string }{
		{"main/manifests.yaml", "kind: Deployment\n"},
		{"post/manifests.yaml", "kind: Job\n"},
		{"pre/manifests.yaml", strings.Repeat("kind: ConfigMap\n---\n", 3000)},
	}
	dir := t.TempDir()
	var entries []entry
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.content), 0o644); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, entry{f.name, strings.NewReader(f.content), int64(len(f.content))})
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
	var got bytes.Buffer
	if err := writeTarGz(&got, entries...); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("the phased archive differs from Flux storage's (%d bytes against %d)", got.Len(), len(want))
	}
}
