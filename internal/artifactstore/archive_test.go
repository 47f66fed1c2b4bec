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
		if err := writeTarGz(&got, "manifests.yaml", strings.NewReader(content), int64(len(content))); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("%d bytes of content: the archive differs from Flux storage's (%d bytes against %d)", len(content), got.Len(), len(want))
		}
	}
}
