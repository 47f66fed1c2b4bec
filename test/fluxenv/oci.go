package fluxenv

import (
	"context"
	"fmt"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/fluxcd/pkg/oci"
	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Registry is an OCI registry (go-containerregistry's, in memory) served over plain HTTP on
// 127.0.0.1, for OCIRepositories and ImageRepositories with `insecure: true`.
type Registry struct {
	Host    string // 127.0.0.1:<Port>
	Port    int
	LogPath string // one line per request

	srv     *http.Server
	logFile *os.File
}

// StartRegistry serves a new, empty registry on a free port of 127.0.0.1.
func StartRegistry(logPath string) (*Registry, error) {
	ln, logFile, err := listenLogged(logPath)
	if err != nil {
		return nil, err
	}
	r := &Registry{Port: ln.Addr().(*net.TCPAddr).Port, LogPath: logPath, logFile: logFile}
	r.Host = loopback(r.Port)
	r.srv = &http.Server{
		Handler:           registry.New(registry.Logger(log.New(logFile, "registry: ", log.LstdFlags))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go r.srv.Serve(ln) //nolint:errcheck // ends with Stop
	return r, nil
}

// URL is the OCIRepository URL of repository repo, oci://127.0.0.1:<port>/<repo>.
func (r *Registry) URL(repo string) string { return "oci://" + r.Host + "/" + repo }

// PushArtifact pushes dir as `flux push artifact` does (Flux's content and config media types,
// org.opencontainers.image.source/revision annotations) to repo:tag, and returns the manifest
// digest.
func (r *Registry) PushArtifact(ctx context.Context, repo, tag, dir, source, revision string) (string, error) {
	c := oci.NewClient(append(oci.DefaultOptions(), crane.Insecure))
	ref, err := c.Push(ctx, strings.TrimPrefix(r.URL(repo), "oci://")+":"+tag, dir,
		oci.WithPushMetadata(oci.Metadata{Source: source, Revision: revision, Created: time.Now().UTC().Format(time.RFC3339)}))
	if err != nil {
		return "", fmt.Errorf("pushing %s to %s:%s: %w", dir, repo, tag, err)
	}
	_, digest, _ := strings.Cut(ref, "@")
	return digest, nil
}

// Image is the image name of repository repo, 127.0.0.1:<port>/<repo>, as an ImageRepository's
// spec.image names it.
func (r *Registry) Image(repo string) string { return r.Host + "/" + repo }

// PushImageTag pushes a tiny image (no layers; a config that names the tag, so that each tag has
// its own digest) to repo:tag, and returns its manifest digest (sha256:...). Enough for
// image-reflector-controller, which lists tags and, when a policy asks for it, reads digests.
func (r *Registry) PushImageTag(ctx context.Context, repo, tag string) (string, error) {
	return r.PushImage(ctx, repo, tag, nil)
}

// PushImage is PushImageTag with more labels in the image's config.
func (r *Registry) PushImage(ctx context.Context, repo, tag string, labels map[string]string) (string, error) {
	all := map[string]string{"org.opencontainers.image.version": tag}
	maps.Copy(all, labels)
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{
		Architecture: "amd64",
		OS:           "linux",
		Config:       v1.Config{Labels: all},
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return "", err
	}
	ref := r.Image(repo) + ":" + tag
	if err := crane.Push(img, ref, crane.Insecure, crane.WithContext(ctx)); err != nil {
		return "", fmt.Errorf("pushing image %s: %w", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	return digest.String(), nil
}

// Stop closes the server.
func (r *Registry) Stop() error {
	err := r.srv.Close()
	r.logFile.Close()
	return err
}
