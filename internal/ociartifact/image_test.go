package ociartifact

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var testMeta = Meta{Source: "https://git.example.com/app.git", Revision: "prod@sha256:" + strings.Repeat("1", 64)}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestImageIsFluxArtifact(t *testing.T) {
	path := tgz(t, "a: 1\n")
	file, _ := os.ReadFile(path)
	img, err := Image(path, Meta{Source: testMeta.Source, Revision: testMeta.Revision, Annotations: map[string]string{"io.kcl-flux.stage": "prod"}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != ConfigMediaType {
		t.Errorf("manifest %s, config %s", m.MediaType, m.Config.MediaType)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != ContentMediaType {
		t.Fatalf("layers %+v, want one %s", m.Layers, ContentMediaType)
	}
	if got := m.Layers[0].Digest.Hex; got != sha256Hex(file) {
		t.Errorf("layer digest %s, not the file's sha256 %s", got, sha256Hex(file))
	}
	want := map[string]string{
		"org.opencontainers.image.created":  "1970-01-01T00:00:00Z",
		"org.opencontainers.image.source":   testMeta.Source,
		"org.opencontainers.image.revision": testMeta.Revision,
		"io.kcl-flux.stage":                 "prod",
	}
	if len(m.Annotations) != len(want) {
		t.Errorf("annotations %v, want %v", m.Annotations, want)
	}
	for k, v := range want {
		if m.Annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, m.Annotations[k], v)
		}
	}
	checkConfig(t, img, file)
}

// checkConfig: created is the epoch, and the diff_id the uncompressed tar's digest, as flux push.
func checkConfig(t *testing.T, img v1.Image, file []byte) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := img.RawConfigFile()
	if cf.Created.Unix() != 0 || !bytes.Contains(raw, []byte(`"created":"1970-01-01T00:00:00Z"`)) {
		t.Errorf("config created %v (%s), want the epoch", cf.Created, raw)
	}
	zr, err := gzip.NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	tar, _ := io.ReadAll(zr)
	if len(cf.RootFS.DiffIDs) != 1 || cf.RootFS.DiffIDs[0].Hex != sha256Hex(tar) {
		t.Errorf("diff_ids %v, want sha256:%s (the uncompressed tar)", cf.RootFS.DiffIDs, sha256Hex(tar))
	}
}

func TestImageDigestDependsOnContentAndMetaOnly(t *testing.T) {
	path := tgz(t, "a: 1\n")
	digest := func(path string, m Meta) v1.Hash {
		img, err := Image(path, m)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := digest(path, testMeta)
	// A copy of the file elsewhere, built again: the same manifest.
	copyPath := filepath.Join(t.TempDir(), "copy.tar.gz")
	b, _ := os.ReadFile(path)
	if err := os.WriteFile(copyPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if again := digest(copyPath, testMeta); again != first {
		t.Errorf("the same tarball gave %s then %s", first, again)
	}
	other := testMeta
	other.Revision = "prod@sha256:" + strings.Repeat("2", 64)
	if d := digest(path, other); d == first {
		t.Errorf("another revision gave the same digest %s", d)
	}
	if d := digest(tgz(t, "a: 2\n"), testMeta); d == first {
		t.Errorf("another tarball gave the same digest %s", d)
	}
}

func TestImagePushedAndPulledBackIsTheFile(t *testing.T) {
	repo := newRepository(t)
	path := tgz(t, "kind: ConfigMap\n")
	file, _ := os.ReadFile(path)
	img, err := Image(path, testMeta)
	if err != nil {
		t.Fatal(err)
	}
	ref := push(t, img, repo, "latest")
	pulled, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := pulled.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %v, %v", layers, err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, file) {
		t.Errorf("pulled layer (%d bytes) is not the file (%d bytes)", len(got), len(file))
	}
	tagged, err := remote.Head(mustTag(t, repo+":latest"))
	if err != nil || tagged.Digest.String() != ref.DigestStr() {
		t.Errorf("latest is %v (%v), pushed %s", tagged, err, ref.DigestStr())
	}
}

func mustTag(t *testing.T, s string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(s, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

// LayerFromOpener would gzip a plain file itself: the layer would no longer be the file.
func TestImageRefusesAFileThatIsNotGzip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plain.tar")
	if err := os.WriteFile(path, []byte("not gzip at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Image(path, testMeta); !errors.Is(err, ErrNotGzip) {
		t.Errorf("error %v, want ErrNotGzip", err)
	}
	if _, err := Image(filepath.Join(t.TempDir(), "missing.tar.gz"), testMeta); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: error %v", err)
	}
}

func TestImageRefusesIncompleteOrClashingMeta(t *testing.T) {
	path := tgz(t, "a: 1\n")
	for name, m := range map[string]Meta{
		"no source":            {Revision: testMeta.Revision},
		"no revision":          {Source: testMeta.Source},
		"created overridden":   {Source: "s", Revision: "r", Annotations: map[string]string{AnnotationCreated: "2026-01-01T00:00:00Z"}},
		"revision overridden":  {Source: "s", Revision: "r", Annotations: map[string]string{AnnotationRevision: "x"}},
		"empty annotation key": {Source: "s", Revision: "r", Annotations: map[string]string{"": "x"}},
	} {
		if _, err := Image(path, m); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
