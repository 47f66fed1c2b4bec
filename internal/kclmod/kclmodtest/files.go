package kclmodtest

import (
	"os"
	"path/filepath"
	"testing"
)

// WriteFiles writes files (slash-separated path → content) under dir, creating directories, and
// returns dir.
func WriteFiles(t testing.TB, dir string, files map[string]string) string {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
