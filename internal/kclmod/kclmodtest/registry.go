// Package kclmodtest provides real servers on 127.0.0.1 for testing KCL package resolution: an
// OCI registry holding KCL packages pushed the way kcl's package manager pushes them, and a Git
// server (git http-backend), both optionally requiring credentials.
package kclmodtest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
)

// Registry is an in-memory OCI registry (go-containerregistry's) served on 127.0.0.1.
type Registry struct {
	// Host is 127.0.0.1:<port>.
	Host   string
	Server *httptest.Server
	// Username and Password, when set, are required (HTTP basic auth) for every request.
	Username, Password string
	// TamperBlob, when set, rewrites the body of every blob download: a registry (or a path to
	// it) serving bytes that do not match their digest.
	TamperBlob func([]byte) []byte

	blobGets     atomic.Int64
	manifestGets atomic.Int64
	conns        atomic.Int64
}

// StartRegistry starts a registry; with a username, every request needs basic auth. It is
// stopped when the test ends.
func StartRegistry(t testing.TB, username, password string) *Registry {
	t.Helper()
	r := &Registry{Username: username, Password: password}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.Username != "" {
			u, p, ok := req.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(r.Username)) != 1 ||
				subtle.ConstantTimeCompare([]byte(p), []byte(r.Password)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="kclmodtest"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
				return
			}
		}
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
			r.blobGets.Add(1)
			if r.TamperBlob != nil {
				rec := httptest.NewRecorder()
				reg.ServeHTTP(rec, req)
				body := r.TamperBlob(rec.Body.Bytes())
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				w.WriteHeader(rec.Code)
				_, _ = w.Write(body)
				return
			}
		}
		if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/manifests/") {
			r.manifestGets.Add(1)
		}
		reg.ServeHTTP(w, req)
	}))
	r.Server.Config.ConnState = countNewConns(&r.conns)
	r.Server.Start()
	t.Cleanup(r.Server.Close)
	r.Host = strings.TrimPrefix(r.Server.URL, "http://")
	return r
}

// BlobGets counts blob downloads (GET .../blobs/...) so far.
func (r *Registry) BlobGets() int64 { return r.blobGets.Load() }

// Conns counts the TCP connections the registry accepted so far.
func (r *Registry) Conns() int64 { return r.conns.Load() }

// ManifestGets counts manifest fetches so far.
func (r *Registry) ManifestGets() int64 { return r.manifestGets.Load() }

// Auth returns the registry's credentials (anonymous without a username).
func (r *Registry) Auth() authn.Authenticator {
	if r.Username == "" {
		return authn.Anonymous
	}
	return &authn.Basic{Username: r.Username, Password: r.Password}
}

// DockerConfigJSON returns a docker config JSON holding the registry's credentials, as in a
// kubernetes.io/dockerconfigjson Secret.
func (r *Registry) DockerConfigJSON() []byte {
	return DockerConfigJSON(r.Host, r.Username, r.Password)
}

// DockerConfigJSON returns {"auths": {host: {"auth": base64(user:password)}}}.
func DockerConfigJSON(host, username, password string) []byte {
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{
		"auth": base64.StdEncoding.EncodeToString([]byte(username + ":" + password)),
	}}})
	return b
}

// Pushed describes a package pushed by PushPackage.
type Pushed struct {
	// Ref is host/repository:tag.
	Ref string
	// Digest is the manifest digest.
	Digest string
	// Sum is the package checksum (the org.kcllang.package.sum annotation).
	Sum string
	// LayerDigest is the digest of the package tar.
	LayerDigest string
}

// PushOptions change how PushPackage pushes.
type PushOptions struct {
	// Gzip compresses the layer (kpm does not; some tools do).
	Gzip bool
	// Sum overrides the org.kcllang.package.sum annotation.
	Sum string
}

// PushPackage pushes the KCL package in dir to ref (host/repository:tag) as kcl's package
// manager does: one layer, the package directory as the uncompressed tar <name>-<version>.tar,
// media type and artifactType application/vnd.oci.image.layer.v1.tar, the empty config, and the
// org.kcllang.package.* annotations.
func (r *Registry) PushPackage(ctx context.Context, ref, dir string, o PushOptions) (Pushed, error) {
	return PushPackage(ctx, ref, dir, r.Auth(), o)
}

// PushPackage pushes the KCL package in dir to ref with auth; see Registry.PushPackage.
func PushPackage(ctx context.Context, ref, dir string, auth authn.Authenticator, o PushOptions) (Pushed, error) {
	mod, err := kclmod.ParseModFile(dir)
	if err != nil {
		return Pushed{}, err
	}
	sum, err := kclmod.Checksum(dir)
	if err != nil {
		return Pushed{}, err
	}
	if o.Sum != "" {
		sum = o.Sum
	}
	tarball, err := TarPackage(dir)
	if err != nil {
		return Pushed{}, err
	}
	layerType := types.MediaType(kclmod.MediaTypePackageLayer)
	if o.Gzip {
		if tarball, err = gzipBytes(tarball); err != nil {
			return Pushed{}, err
		}
		layerType = types.OCILayer
	}
	return PushLayer(ctx, ref, tarball, layerType, auth, map[string]string{
		kclmod.AnnotationPackageName: mod.Package.Name,
		kclmod.AnnotationPackageVer:  mod.Package.Version,
		kclmod.AnnotationPackageDesc: mod.Package.Description,
		kclmod.AnnotationPackageSum:  sum,
	})
}

// PushLayer pushes a prepared package layer (a tar or tar.gz, possibly hostile) to ref
// (host/repository:tag) in the manifest form PushPackage uses, with the given org.kcllang.package.*
// annotations. The package name and version of the layer title are taken from them.
func PushLayer(ctx context.Context, ref string, layerBytes []byte, layerType types.MediaType, auth authn.Authenticator, annotations map[string]string) (Pushed, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return Pushed{}, err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuth(auth)}
	layer := static.NewLayer(layerBytes, layerType)
	config := static.NewLayer([]byte("{}"), "application/vnd.oci.empty.v1+json")
	for _, l := range []v1.Layer{layer, config} {
		if err := remote.WriteLayer(tag.Context(), l, opts...); err != nil {
			return Pushed{}, err
		}
	}
	ld, _ := layer.Digest()
	cd, _ := config.Digest()
	all := map[string]string{kclmod.AnnotationImageCreated: time.Now().UTC().Format(time.RFC3339)}
	for k, v := range annotations {
		all[k] = v
	}
	manifest := map[string]any{
		"schemaVersion": 2,
		"mediaType":     string(types.OCIManifestSchema1),
		"artifactType":  kclmod.MediaTypePackageLayer,
		"config": map[string]any{
			"mediaType": "application/vnd.oci.empty.v1+json", "digest": cd.String(), "size": 2, "data": "e30=",
		},
		"layers": []any{map[string]any{
			"mediaType": string(layerType), "digest": ld.String(), "size": len(layerBytes),
			"annotations": map[string]string{
				kclmod.AnnotationImageTitle: fmt.Sprintf("%s-%s.tar", all[kclmod.AnnotationPackageName], all[kclmod.AnnotationPackageVer]),
			},
		}},
		"annotations": all,
	}
	raw, err := json.Marshal(manifest)
	if err != nil {
		return Pushed{}, err
	}
	if err := remote.Put(tag, rawManifest(raw), opts...); err != nil {
		return Pushed{}, err
	}
	d, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return Pushed{}, err
	}
	return Pushed{Ref: ref, Digest: d.String(), Sum: annotations[kclmod.AnnotationPackageSum], LayerDigest: ld.String()}, nil
}

// PushLayer pushes a prepared layer with the registry's credentials; see PushLayer.
func (r *Registry) PushLayer(ctx context.Context, ref string, layerBytes []byte, layerType types.MediaType, annotations map[string]string) (Pushed, error) {
	return PushLayer(ctx, ref, layerBytes, layerType, r.Auth(), annotations)
}

type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// TarPackage tars a package directory as kpm's utils.TarDir does: every path, named relative to
// the package root ("." for the root itself), except those containing ".git" or ".tar".
func TarPackage(dir string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.Walk(dir, func(p string, info fs.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if strings.Contains(rel, ".git") || strings.Contains(rel, ".tar") {
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WritePackage writes a KCL package: kcl.mod for name and version (with deps, lines of its
// [dependencies] section) and the given files.
func WritePackage(t testing.TB, dir, name, version string, deps []string, files map[string]string) string {
	t.Helper()
	mod := fmt.Sprintf("[package]\nname = %q\nedition = \"v0.11.0\"\nversion = %q\n", name, version)
	if len(deps) > 0 {
		mod += "\n[dependencies]\n" + strings.Join(deps, "\n") + "\n"
	}
	all := map[string]string{"kcl.mod": mod}
	for k, v := range files {
		all[k] = v
	}
	return WriteFiles(t, dir, all)
}

// OCILock is a kcl.mod.lock with one OCI dependency, in the form kcl's package manager writes.
func OCILock(name, version, sum, reg, repo string) string {
	return fmt.Sprintf(`[dependencies]
  [dependencies.%[1]s]
    name = %[1]q
    full_name = "%[1]s_%[2]s"
    version = %[2]q
    sum = %[3]q
    reg = %[4]q
    repo = %[5]q
    oci_tag = %[2]q
`, name, version, sum, reg, repo)
}
