package ociartifact

import (
	"testing"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/provenance"
)

// statementAbout is the provenance statement of a render whose artifact image is
// repository@manifest, as the controller makes it.
func statementAbout(t *testing.T, repository, manifest string) []byte {
	t.Helper()
	st, err := provenance.Statement(provenance.Build{
		Repository: repository, Manifest: manifest,
		SourceKind: "GitRepository", SourceURL: "https://git.example.com/app.git",
		SourceRevision: "main@sha1:0123456789abcdef0123456789abcdef01234567",
		Arguments:      map[string]string{"token": "***"},
		Controller:     "https://github.com/kcl-flux/kcl-artifact-controller",
		StartedOn:      time.Unix(1, 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}
