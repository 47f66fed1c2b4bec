// Package source resolves the Flux source a KCLArtifact names and fetches its artifact: the
// download is size-limited, its digest verified, and the tarball unpacked without symlinks or
// paths that leave the target directory.
package source

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"

	"github.com/fluxcd/pkg/apis/meta"
	"github.com/fluxcd/pkg/http/fetch"
	"github.com/fluxcd/pkg/tar"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kclv1 "github.com/kcl-flux/kcl-artifact-controller/api/v1alpha1"
	"github.com/kcl-flux/kcl-artifact-controller/internal/fstree"
)

// Source is a Flux source object with an artifact.
type Source interface {
	client.Object
	GetArtifact() *meta.Artifact
}

// New returns an empty object of the given source kind.
func New(kind string) (Source, error) {
	switch kind {
	case sourcev1.GitRepositoryKind:
		return &sourcev1.GitRepository{}, nil
	case sourcev1.OCIRepositoryKind:
		return &sourcev1.OCIRepository{}, nil
	case sourcev1.BucketKind:
		return &sourcev1.Bucket{}, nil
	case sourcev1.ExternalArtifactKind:
		return &sourcev1.ExternalArtifact{}, nil
	}
	return nil, fmt.Errorf("unsupported source kind %q", kind)
}

// Key is the namespaced name of the referenced source.
func Key(obj *kclv1.KCLArtifact) types.NamespacedName {
	ns := obj.Spec.SourceRef.Namespace
	if ns == "" {
		ns = obj.GetNamespace()
	}
	return types.NamespacedName{Namespace: ns, Name: obj.Spec.SourceRef.Name}
}

// Get reads the referenced source.
func Get(ctx context.Context, c client.Reader, obj *kclv1.KCLArtifact) (Source, error) {
	src, err := New(obj.Spec.SourceRef.Kind)
	if err != nil {
		return nil, err
	}
	return src, c.Get(ctx, Key(obj), src)
}

// Fetcher downloads and unpacks source artifacts.
type Fetcher struct {
	limits Limits
}

// Limits bound a fetch.
type Limits struct {
	Retries         int
	MaxDownloadSize int
	MaxUntarSize    int
	// MaxEntries bounds the files and directories of an archive: a million empty files
	// compress to a few megabytes and pass every size bound.
	MaxEntries int
	// HostnameOverwrite replaces the artifact URL's host, for controllers that reach the source
	// server by another address than the one it advertises.
	HostnameOverwrite string
}

// DefaultMaxEntries is the default of Limits.MaxEntries.
const DefaultMaxEntries = 100_000

// NewFetcher returns a Fetcher with the given limits.
func NewFetcher(l Limits) *Fetcher {
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	return &Fetcher{limits: l}
}

// TooManyEntriesError is an archive with more entries than Limits.MaxEntries.
type TooManyEntriesError struct{ Max int }

func (e *TooManyEntriesError) Error() string {
	return fmt.Sprintf("the archive has more than %d entries (files and directories; --max-source-entries)", e.Max)
}

// Fetch downloads the artifact, verifies its digest and unpacks it into dir. Entries past
// MaxEntries are not written, and the fetch fails. A plain tar is unpacked as well as a tar.gz:
// an OCIRepository whose layerSelector copies a KCL package (`kcl mod push` makes an uncompressed
// tar layer) serves the layer as it is.
func (f *Fetcher) Fetch(ctx context.Context, a *meta.Artifact, dir string) error {
	err := f.fetch(ctx, a, dir)
	if errors.Is(err, gzip.ErrHeader) {
		err = f.fetch(ctx, a, dir, tar.WithSkipGzip())
	}
	return err
}

func (f *Fetcher) fetch(ctx context.Context, a *meta.Artifact, dir string, opts ...tar.Option) error {
	entries := 0
	over := func(name string, _ os.FileInfo) bool {
		// version control metadata is never unpacked, as source-controller's artifacts hold none
		if fstree.VCSMetadata(name) {
			return true
		}
		entries++
		return entries > f.limits.MaxEntries
	}
	l := f.limits
	fetcher := fetch.New(
		fetch.WithRetries(l.Retries),
		fetch.WithMaxDownloadSize(l.MaxDownloadSize),
		fetch.WithUntar(append(opts, tar.WithMaxUntarSize(l.MaxUntarSize), tar.WithFilter(over))...),
		fetch.WithHostnameOverwrite(l.HostnameOverwrite),
	)
	if err := fetcher.FetchWithContext(ctx, a.URL, a.Digest, dir); err != nil {
		return fmt.Errorf("fetching artifact %s: %w", a.Revision, err)
	}
	if entries > l.MaxEntries {
		return fmt.Errorf("fetching artifact %s: %w", a.Revision, &TooManyEntriesError{Max: l.MaxEntries})
	}
	return nil
}

// OriginKey is the artifact metadata key naming where an artifact's content came from; `flux
// trace` shows it as the Origin Source.
const OriginKey = "org.opencontainers.image.source"

// URL is where the source's content comes from: the repository's or bucket's address, or for an
// ExternalArtifact the origin its producer recorded (empty when none did).
// Credentials in the address are left out.
func URL(s Source) string {
	var raw string
	switch o := s.(type) {
	case *sourcev1.GitRepository:
		raw = o.Spec.URL
	case *sourcev1.OCIRepository:
		raw = o.Spec.URL
	case *sourcev1.Bucket:
		raw = o.Spec.Endpoint + "/" + o.Spec.BucketName
	default:
		if a := s.GetArtifact(); a != nil {
			raw = a.Metadata[OriginKey]
		}
	}
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		u.User = nil
		return u.String()
	}
	return raw
}
