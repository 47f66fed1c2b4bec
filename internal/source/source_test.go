package source

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/apis/meta"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

// emptyFiles is a tar.gz of a kcl.mod and n empty files: a few megabytes for a million.
func emptyFiles(t *testing.T, n int) []byte {
	t.Helper()
	b, err := kclmodtest.EmptyFilesTarGz(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func serve(t *testing.T, body []byte) *meta.Artifact {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) }))
	t.Cleanup(srv.Close)
	return &meta.Artifact{URL: srv.URL + "/a.tar.gz", Revision: "main@sha1:x", Digest: fmt.Sprintf("sha256:%x", sha256.Sum256(body))}
}

func count(t *testing.T, dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(string, fs.DirEntry, error) error { n++; return nil })
	return n
}

func TestMillionEmptyFilesAreRefused(t *testing.T) {
	body := emptyFiles(t, 1_000_000)
	t.Logf("1,000,000 empty files: %d bytes compressed", len(body))
	f := NewFetcher(Limits{Retries: 1, MaxDownloadSize: 50 << 20, MaxUntarSize: 100 << 20, MaxEntries: 10_000})
	dir := t.TempDir()
	err := f.Fetch(context.Background(), serve(t, body), dir)
	var tm *TooManyEntriesError
	if !errors.As(err, &tm) || tm.Max != 10_000 {
		t.Fatalf("want TooManyEntriesError naming 10000, got %v", err)
	}
	if n := count(t, dir); n > 10_000+20 {
		t.Fatalf("%d entries written past the bound", n)
	}
}

func TestArchiveWithinTheBoundIsUnpacked(t *testing.T) {
	f := NewFetcher(Limits{Retries: 1, MaxDownloadSize: 50 << 20, MaxUntarSize: 100 << 20, MaxEntries: 10_000})
	dir := t.TempDir()
	if err := f.Fetch(context.Background(), serve(t, emptyFiles(t, 5000)), dir); err != nil {
		t.Fatal(err)
	}
	if count(t, dir) < 5000 {
		t.Fatalf("files missing: %d entries", count(t, dir))
	}
}

func TestURL(t *testing.T) {
	withOrigin := &sourcev1.ExternalArtifact{Status: sourcev1.ExternalArtifactStatus{
		Artifact: &meta.Artifact{Metadata: map[string]string{OriginKey: "https://git.example/app"}}}}
	for name, tc := range map[string]struct {
		src  Source
		want string
	}{
		"git":                  {&sourcev1.GitRepository{Spec: sourcev1.GitRepositorySpec{URL: "https://git.example/app"}}, "https://git.example/app"},
		"git with credentials": {&sourcev1.GitRepository{Spec: sourcev1.GitRepositorySpec{URL: "https://u:secret@git.example/app"}}, "https://git.example/app"},
		"oci":                  {&sourcev1.OCIRepository{Spec: sourcev1.OCIRepositorySpec{URL: "oci://reg.example/app"}}, "oci://reg.example/app"},
		"bucket":               {&sourcev1.Bucket{Spec: sourcev1.BucketSpec{Endpoint: "minio.example:9000", BucketName: "configs"}}, "minio.example:9000/configs"},
		"external with origin": {withOrigin, "https://git.example/app"},
		"external without":     {&sourcev1.ExternalArtifact{}, ""},
	} {
		if got := URL(tc.src); got != tc.want {
			t.Errorf("%s: URL = %q, want %q", name, got, tc.want)
		}
	}
}

// A plain tar (an OCIRepository layer copied as it is, from `kcl mod push`) is unpacked under the
// same bounds as a tar.gz: its files land in dir, a `../` entry never lands outside it, and too
// many entries are refused.
func TestPlainTar(t *testing.T) {
	f := NewFetcher(Limits{Retries: 1, MaxDownloadSize: 50 << 20, MaxUntarSize: 100 << 20, MaxEntries: 100})
	t.Run("unpacked", func(t *testing.T) {
		dir := t.TempDir()
		if err := f.Fetch(context.Background(), serve(t, kclmodtest.Tar(map[string]string{"kcl.mod": "[package]\n", "main.k": "a = 1\n"})), dir); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "main.k")); err != nil || string(b) != "a = 1\n" {
			t.Fatalf("main.k: %q, %v", b, err)
		}
	})
	t.Run("../ stays inside", func(t *testing.T) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "src")
		_ = f.Fetch(context.Background(), serve(t, kclmodtest.Tar(map[string]string{"../escaped.k": "x = 1\n"})), dir)
		if _, err := os.Stat(filepath.Join(parent, "escaped.k")); !os.IsNotExist(err) {
			t.Fatalf("a ../ entry was written outside the source directory: %v", err)
		}
	})
	t.Run("too many entries", func(t *testing.T) {
		files := map[string]string{}
		for i := range 500 {
			files[fmt.Sprintf("e%03d.k", i)] = ""
		}
		err := f.Fetch(context.Background(), serve(t, kclmodtest.Tar(files)), t.TempDir())
		var tm *TooManyEntriesError
		if !errors.As(err, &tm) {
			t.Fatalf("want TooManyEntriesError, got %v", err)
		}
	})
	t.Run("neither gzip nor tar", func(t *testing.T) {
		err := f.Fetch(context.Background(), serve(t, []byte("<html>not an archive</html>")), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), "fetching artifact main@sha1:x") {
			t.Fatalf("want an error naming the artifact, got %v", err)
		}
	})
}

// An artifact holding version control metadata (a Bucket or an OCI artifact packed from a
// checkout) is unpacked without it, as source-controller's Git artifacts are: no program reads
// a .git/config, a worktree's .git file or an .hg, .svn or .bzr directory. Watched first: they
// were unpacked.
func TestVersionControlMetadataIsNotUnpacked(t *testing.T) {
	f := NewFetcher(Limits{Retries: 1, MaxDownloadSize: 50 << 20, MaxUntarSize: 100 << 20, MaxEntries: 100})
	dir := t.TempDir()
	archive := kclmodtest.TarGz(map[string]string{
		"main.k": "a = 1\n", ".git/config": "[http]\n\textraheader = AUTHORIZATION: basic TOKEN\n",
		"app/.git": "gitdir: /elsewhere\n", "app/main.k": "b = 1\n", "x/.hg/hgrc": "", "y/.svn/entries": "", ".bzr/branch": "",
		"not.git/kept.k": "c = 1\n",
	})
	if err := f.Fetch(context.Background(), serve(t, archive), dir); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{".git", "app/.git", "x/.hg", "y/.svn", ".bzr"} {
		if _, err := os.Lstat(filepath.Join(dir, gone)); !os.IsNotExist(err) {
			t.Errorf("%s was unpacked", gone)
		}
	}
	for _, kept := range []string{"main.k", "app/main.k", "not.git/kept.k"} {
		if _, err := os.Stat(filepath.Join(dir, kept)); err != nil {
			t.Errorf("%s: %v", kept, err)
		}
	}
}
