package kclmod

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// countEntries counts everything under dir, dir excluded.
func countEntries(t *testing.T, dir string) int {
	t.Helper()
	n := -1
	err := filepath.WalkDir(dir, func(string, fs.DirEntry, error) error { n++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A million-entry archive, streamed: extraction stops at the first entry past the bound, having
// read and written only that far.
func TestExtractStopsAtTheEntryBound(t *testing.T) {
	const total, bound = 1_000_000, 1000
	pr, pw := io.Pipe()
	written := make(chan int, 1)
	go func() {
		tw := tar.NewWriter(pw)
		i := 0
		for ; i < total; i++ {
			if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("e%07d.k", i), Mode: 0o644, Typeflag: tar.TypeReg}); err != nil {
				break // the reader is gone
			}
		}
		if i == total {
			pw.CloseWithError(tw.Close())
		}
		written <- i
	}()
	dst := t.TempDir()
	err := extractTar(pr, dst, 1<<30, bound)
	pr.Close()
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d files and directories", bound)) {
		t.Fatalf("want the entry bound in the error, got %v", err)
	}
	// the tar writer is ahead of the extractor by what the pipe and the reader's buffer hold
	if n := <-written; n > bound+64 {
		t.Fatalf("%d entries were read from the archive for a bound of %d", n, bound)
	}
	if n := countEntries(t, dst); n > bound {
		t.Fatalf("%d entries extracted for a bound of %d", n, bound)
	}
}

func tarOf(t *testing.T, hdrs ...*tar.Header) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(buf.Bytes())
}

// Directories count, named by the archive or made implicitly for a file's path.
func TestExtractCountsDirectories(t *testing.T) {
	var dirs []*tar.Header
	for i := range 20 {
		dirs = append(dirs, &tar.Header{Name: fmt.Sprintf("d%02d/", i), Mode: 0o755, Typeflag: tar.TypeDir})
	}
	err := extractTar(tarOf(t, dirs...), t.TempDir(), 1<<20, 10)
	if err == nil || !strings.Contains(err.Error(), "more than 10 files and directories") {
		t.Fatalf("20 directories, bound 10: %v", err)
	}

	dst := t.TempDir()
	deep := &tar.Header{Name: "a/b/c/d/e/f/g/h/i/j/k/l/file.k", Mode: 0o644, Typeflag: tar.TypeReg}
	err = extractTar(tarOf(t, deep), dst, 1<<20, 10)
	if err == nil || !strings.Contains(err.Error(), "more than 10 files and directories") {
		t.Fatalf("one file under 12 implicit directories, bound 10: %v", err)
	}
	if n := countEntries(t, dst); n != 0 {
		t.Fatalf("%d entries made before the bound was found passed", n)
	}

	dst = t.TempDir()
	if err := extractTar(tarOf(t, deep), dst, 1<<20, 13); err != nil {
		t.Fatalf("13 entries, bound 13: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dst, "a/b/c/d/e/f/g/h/i/j/k/l/file.k")); err != nil {
		t.Fatal(err)
	}
}
