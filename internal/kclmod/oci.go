package kclmod

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Media types and annotations of KCL packages in OCI registries (see the package documentation).
const (
	MediaTypePackageLayer   = "application/vnd.oci.image.layer.v1.tar"
	AnnotationPackageName   = "org.kcllang.package.name"
	AnnotationPackageVer    = "org.kcllang.package.version"
	AnnotationPackageDesc   = "org.kcllang.package.description"
	AnnotationPackageSum    = "org.kcllang.package.sum"
	AnnotationImageCreated  = "org.opencontainers.image.created"
	AnnotationImageTitle    = "org.opencontainers.image.title"
	mediaTypeGzipLayer      = "application/vnd.oci.image.layer.v1.tar+gzip"
	mediaTypeDockerGzipLyr  = "application/vnd.docker.image.rootfs.diff.tar.gzip"
	mediaTypeOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
)

type ociManifest struct {
	MediaType    string            `json:"mediaType"`
	ArtifactType string            `json:"artifactType"`
	Layers       []ociDescriptor   `json:"layers"`
	Annotations  map[string]string `json:"annotations"`
}

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

func (r *Resolver) remoteOptions(ctx context.Context, kc *keychain) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc),
		remote.WithUserAgent("kcl-artifact-controller"), remote.WithTransport(r.net.rt)}
}

// fetchOCI returns the pinned cache entry of the package o (resolving its tag to a manifest
// digest with the registry on every call, which also checks the caller may read it).
func (r *Resolver) fetchOCI(ctx context.Context, o *ociRef, kc *keychain) (*entry, bool, error) {
	if !r.net.policy.hostAllowed(o.Registry) {
		return nil, false, fmt.Errorf("%w: %s is not one of the allowed hosts", ErrHostNotAllowed, o.Registry)
	}
	if err := checkOCIName(o); err != nil {
		return nil, false, err
	}
	ctx, cg := r.net.withCall(ctx)
	c := ociCall{o: o, opts: r.remoteOptions(ctx, kc),
		fail: func(doing string, err error) error {
			return registryError(o.Registry, o.location(), kc, cg, doing, err)
		}}
	ref, err := r.ociReference(c)
	if err != nil {
		return nil, false, err
	}
	desc, err := remote.Get(ref, c.opts...)
	if err != nil {
		return nil, false, c.fail("fetching the manifest", err)
	}
	if mt := string(desc.MediaType); mt != mediaTypeOCIManifest && mt != mediaTypeDockerManifest {
		return nil, false, fmt.Errorf("%s is a %s, not a KCL package (an image manifest)", o.location(), mt)
	}
	// The registry and repository are part of the key: another registry replaying the manifest
	// of a package this cache holds is asked for the layer itself, and gets nothing from here.
	where := sha256.Sum256([]byte(ref.Context().RegistryStr() + "/" + ref.Context().RepositoryStr()))
	key := "oci-" + hex.EncodeToString(where[:8]) + "-" + desc.Digest.Hex
	e, downloaded, err := r.cache.get(ctx, key, func(dir string) (entryMeta, error) {
		m, err := r.unpackOCI(c, ref.Context(), desc, dir)
		m.Private = kc.has(o.Registry)
		return m, err
	})
	if err == nil && !downloaded && e.meta.Private {
		err = confirmLayer(c, ref.Context(), e.meta)
		if err != nil {
			e.pin.Close()
			e = nil
		}
	}
	return e, downloaded, err
}

// confirmLayer asks the registry, with this caller's credentials, whether the caller may read the
// layer of a cached package that was fetched with credentials (the kubelet's "ensure secret
// pulled images" rule): being able to name content is not being allowed to read it.
func confirmLayer(c ociCall, repo name.Repository, m entryMeta) error {
	if m.LayerDigest == "" {
		return errors.New("the cached package does not record its layer: it is fetched again once evicted")
	}
	l, err := remote.Layer(repo.Digest(m.LayerDigest), c.opts...)
	if err != nil {
		return c.fail("confirming access to the cached package", err)
	}
	if _, err := l.Size(); err != nil {
		return c.fail("confirming access to the cached package", err)
	}
	return nil
}

// ociCall is one fetch from a registry: the package, the options of its requests, and how its
// failures are explained.
type ociCall struct {
	o    *ociRef
	opts []remote.Option
	fail func(doing string, err error) error
}

// ociReference returns the reference of c's manifest. A package given without a tag or digest
// gets the highest version tag of its repository, which is recorded in c.o.
func (r *Resolver) ociReference(c ociCall) (name.Reference, error) {
	o := c.o
	var nopts []name.Option
	if slices.Contains(r.opts.InsecureRegistries, o.Registry) {
		nopts = append(nopts, name.Insecure)
	}
	repo, err := name.NewRepository(o.Registry+"/"+o.Repository, nopts...)
	if err != nil {
		return nil, fmt.Errorf("invalid repository: %w", err)
	}
	if o.Tag == "" && o.Digest == "" {
		tags, err := remote.List(repo, c.opts...)
		if err != nil {
			return nil, c.fail("listing the versions", err)
		}
		if o.Tag = latestVersion(tags); o.Tag == "" {
			return nil, fmt.Errorf("no version tag in %s", o.location())
		}
	}
	var ref name.Reference
	if o.Digest != "" {
		ref, err = name.NewDigest(repo.Name()+"@"+o.Digest, nopts...)
	} else {
		ref, err = name.NewTag(repo.Name()+":"+o.Tag, nopts...)
	}
	if err != nil {
		return nil, fmt.Errorf("invalid reference: %w", err)
	}
	return ref, nil
}

// unpackOCI extracts the package layer of the manifest desc, from repo, into the cache
// directory dir. The layer's declared size is checked before anything is downloaded.
func (r *Resolver) unpackOCI(c ociCall, repo name.Repository, desc *remote.Descriptor, dir string) (entryMeta, error) {
	var m ociManifest
	if err := json.Unmarshal(desc.Manifest, &m); err != nil {
		return entryMeta{}, fmt.Errorf("invalid manifest: %w", err)
	}
	layer, err := packageLayer(m)
	if err != nil {
		return entryMeta{}, err
	}
	if layer.Size > r.opts.MaxPackageBytes {
		return entryMeta{}, fmt.Errorf("the package layer is larger than %d bytes", r.opts.MaxPackageBytes)
	}
	l, err := remote.Layer(repo.Digest(layer.Digest), c.opts...)
	if err != nil {
		return entryMeta{}, c.fail("fetching the package", err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return entryMeta{}, c.fail("fetching the package", err)
	}
	defer rc.Close()
	if err := extractTar(rc, filepath.Join(dir, "pkg"), r.opts.MaxPackageBytes, r.opts.MaxPackageFiles); err != nil {
		return entryMeta{}, c.fail("fetching the package", err)
	}
	if err := drainVerified(rc, layer.Size); err != nil {
		return entryMeta{}, c.fail("fetching the package", err)
	}
	return entryMeta{Source: c.o.location(), Digest: desc.Digest.String(), ManifestSum: m.Annotations[AnnotationPackageSum],
		LayerDigest: layer.Digest}, nil
}

// drainVerified reads what the tar reader left of a layer stream (the tar's padding, or bytes a
// registry added): go-containerregistry verifies the digest only when the stream ends, so an
// extraction that stopped at the tar's end marker has not been verified yet. At most size bytes
// (the declared size, already bounded) and one more are read.
func drainVerified(rc io.Reader, size int64) error {
	if _, err := io.Copy(io.Discard, io.LimitReader(rc, size+1)); err != nil {
		return fmt.Errorf("reading the package archive: %w", err)
	}
	return nil
}

// packageLayer picks the package tar among the manifest's layers: kpm pushes exactly one.
func packageLayer(m ociManifest) (ociDescriptor, error) {
	var tars []ociDescriptor
	for _, l := range m.Layers {
		switch l.MediaType {
		case MediaTypePackageLayer, mediaTypeGzipLayer, mediaTypeDockerGzipLyr:
			tars = append(tars, l)
		}
	}
	switch {
	case len(tars) == 1:
		return tars[0], nil
	case len(tars) == 0 && len(m.Layers) == 1:
		return m.Layers[0], nil
	case len(tars) == 0:
		return ociDescriptor{}, fmt.Errorf("not a KCL package: no %s layer", MediaTypePackageLayer)
	default:
		return ociDescriptor{}, fmt.Errorf("not a KCL package: %d tar layers, expected one", len(tars))
	}
}

// registryError explains a registry failure without credentials in it, and without anything a
// host the guard refused would tell.
func registryError(registry, location string, kc *keychain, cg *callGuard, doing string, err error) error {
	if na := cg.notAllowed(registry, err); na != nil {
		return fmt.Errorf("%s: %w", doing, na)
	}
	if be := cg.boundBroken(); be != nil {
		return fmt.Errorf("%s: %w", doing, be)
	}
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			if kc.has(registry) {
				return fmt.Errorf("%s: registry %s refused the credentials given for it (HTTP %d)", doing, registry, te.StatusCode)
			}
			return fmt.Errorf("%s: registry %s requires authentication (HTTP %d) and no credentials were given for it", doing, registry, te.StatusCode)
		case http.StatusNotFound:
			return fmt.Errorf("%s: %s not found (HTTP 404)", doing, location)
		}
		// the status alone: the body is never read past a bound, nor shown
		return fmt.Errorf("%s: registry %s answered HTTP %d", doing, registry, te.StatusCode)
	}
	return fmt.Errorf("%s: %w", doing, err)
}
