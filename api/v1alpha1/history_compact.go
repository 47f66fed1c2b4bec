package v1alpha1

import (
	"encoding/json"
	"net/url"
	"path"
	"strings"

	"github.com/fluxcd/pkg/apis/meta"
)

// A KCLArtifact's status is written with every status write of it, and the API server's price of
// a write follows the object's size: status.history does not repeat what the current artifact and
// each entry's digest give. An entry's URL is stored as its file name, relative to
// status.artifact.url (same address, directory and token), and its revision is left out when it is
// `<ref of sourceRevision>@<digest>`, as the controller names what it renders. MarshalJSON writes
// that form and UnmarshalJSON reads it back whole, so that every reader in Go (the controller, its
// cache, the artifact server, the browser view and flux kcl) sees complete entries.

// RevisionRef is the ref part of a Flux revision (`main@sha1:…` → `main`), `latest` when the
// source revision has none: the controller names an artifact rendered from sourceRevision
// `<RevisionRef>@<digest>`.
func RevisionRef(sourceRevision string) string {
	if ref, _, ok := strings.Cut(sourceRevision, "@"); ok && ref != "" {
		return ref
	}
	return "latest"
}

// HistoryRevision is the revision the controller gives an artifact of this digest rendered from
// sourceRevision (RevisionRef), which status.history does not store.
func HistoryRevision(sourceRevision, digest string) string {
	return RevisionRef(sourceRevision) + "@" + digest
}

// kclArtifactStatus is KCLArtifactStatus without its JSON methods.
type kclArtifactStatus KCLArtifactStatus

// MarshalJSON writes status.history in its stored form: URLs beside status.artifact.url as file
// names, revisions the digest and source revision give left out.
func (in KCLArtifactStatus) MarshalJSON() ([]byte, error) {
	if len(in.History) > 0 {
		base := artifactBase(in.Artifact)
		h := make([]ArtifactHistoryEntry, len(in.History))
		for i, e := range in.History {
			if e.Revision != "" && e.Digest != "" && e.Revision == HistoryRevision(e.SourceRevision, e.Digest) {
				e.Revision = ""
			}
			if base != nil {
				if file, ok := base.relative(e.URL); ok {
					e.URL = file
				}
			}
			h[i] = e
		}
		in.History = h
	}
	return json.Marshal(kclArtifactStatus(in))
}

// UnmarshalJSON reads status.history whole: a URL stored as a file name is resolved against
// status.artifact.url, a revision left out is the one digest and source revision give.
//
// It decodes into a zero status: decoding into a populated one (a client's Get into an object read
// before) would keep, in the entries it reuses, the fields the JSON leaves out, such as a revision.
func (in *KCLArtifactStatus) UnmarshalJSON(data []byte) error {
	*in = KCLArtifactStatus{}
	if err := json.Unmarshal(data, (*kclArtifactStatus)(in)); err != nil {
		return err
	}
	base := artifactBase(in.Artifact)
	for i := range in.History {
		e := &in.History[i]
		if e.Revision == "" && e.Digest != "" {
			e.Revision = HistoryRevision(e.SourceRevision, e.Digest)
		}
		if base != nil && isFileName(e.URL) {
			e.URL = base.resolve(e.URL)
		}
	}
	return nil
}

// urlBase is the address, directory and query of the current artifact's URL.
type urlBase struct{ u *url.URL }

func artifactBase(a *meta.Artifact) *urlBase {
	if a == nil {
		return nil
	}
	u, err := url.Parse(a.URL)
	if err != nil || u.Scheme == "" || u.Host == "" || u.Fragment != "" || u.Opaque != "" {
		return nil
	}
	return &urlBase{u: u}
}

// relative is raw's file name when raw is a URL in the base's directory with its query.
func (b *urlBase) relative(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != b.u.Scheme || u.Host != b.u.Host || u.User.String() != b.u.User.String() ||
		u.RawQuery != b.u.RawQuery || u.Fragment != "" || u.Opaque != "" || u.RawPath != "" {
		return "", false
	}
	dir, file := path.Split(u.Path)
	if dir != path.Dir(b.u.Path)+"/" || !isFileName(file) {
		return "", false
	}
	return file, true
}

// resolve is the URL of file in the base's directory, with its query.
func (b *urlBase) resolve(file string) string {
	u := *b.u
	u.Path = path.Dir(b.u.Path) + "/" + file
	u.RawPath = ""
	return u.String()
}

// isFileName tells whether s is a plain file name: no scheme, directory, query or escape.
func isFileName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/:?#%\\ ")
}
