package ocipush_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"

	"github.com/kcl-flux/kcl-artifact-controller/internal/childproc"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ociartifact/ociartifacttest"
	"github.com/kcl-flux/kcl-artifact-controller/internal/ocipush"
	"github.com/kcl-flux/kcl-artifact-controller/internal/provenance"
	"github.com/kcl-flux/kcl-artifact-controller/internal/sandbox"
)

// The test binary doubles as the push process.
func TestMain(m *testing.M) {
	ocipush.ServeIfPusher()
	os.Exit(m.Run())
}

func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// newPusher returns a sandboxed Pusher whose guard admits 127.0.0.1 only when local.
func newPusher(t *testing.T, local bool, o ocipush.Options) *ocipush.Pusher {
	t.Helper()
	if err := sandbox.Check(); err != nil {
		t.Fatalf("this test needs Landlock: %v", err)
	}
	o.Sandbox = true
	o.StagingDir = t.TempDir()
	if local {
		o.Network.AllowedNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	}
	p, err := ocipush.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// artifact writes an artifact tarball and returns its path and digest.
func artifact(t *testing.T, content string) (string, string) {
	return ociartifacttest.Tarball(t, content)
}

func keys(t *testing.T) (signature.SignerVerifier, signature.Verifier) {
	t.Helper()
	priv, pub, err := ociartifact.GenerateKeyPair([]byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := ociartifact.LoadSigner(priv, []byte("pw"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := ociartifact.LoadVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

func request(reg *kclmodtest.Registry, path, digest string, s signature.Signer) ocipush.Request {
	repo := reg.Host + "/fleet/app"
	return ocipush.Request{Domain: "team-a", Repository: repo, Insecure: true, Artifact: path,
		ArtifactDigest: digest, Tag: "production", Signer: s, DockerConfig: reg.DockerConfigJSON(),
		Meta: ociartifact.Meta{Source: "https://git.example/app.git", Revision: "main@" + digest},
		Provenance: func(m v1.Hash) ([]byte, error) {
			return provenance.Statement(provenance.Build{Repository: repo, Manifest: m.String(),
				SourceKind: "GitRepository", SourceURL: "https://git.example/app.git",
				SourceRevision: "main@sha1:0123456789abcdef0123456789abcdef01234567", Path: "app",
				Arguments: map[string]string{"env": "prod", "token": "***"}, Engine: "v0.11.2",
				Controller: "https://kcl-flux.github.io/kcl-artifact-controller", ControllerVersion: "test"})
		}}
}

// A signed push lands under the digest tag and the moving tag, with a signature and an
// attestation that the verifier (with the claim check) accepts; the layer is the tarball.
func TestPushSignedArtifact(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "tenant", "s3cret")
	p := newPusher(t, true, ocipush.Options{})
	path, digest := artifact(t, "kind: ConfigMap\n")
	s, v := keys(t)
	res, err := p.Push(testCtx(t), request(reg, path, digest, s))
	if err != nil {
		t.Fatal(err)
	}
	if want := "kcl-sha256-" + strings.TrimPrefix(digest, "sha256:"); len(res.Tags) != 2 || res.Tags[0] != want || res.Tags[1] != "production" || !res.Signed {
		t.Fatalf("result %+v: want tags [%s production], signed", res, want)
	}
	opts := []remote.Option{remote.WithAuth(reg.Auth())}
	repo, _ := name.NewRepository(res.Repository, name.Insecure)
	for _, tag := range res.Tags {
		desc, err := remote.Head(repo.Tag(tag), opts...)
		if err != nil || desc.Digest.String() != res.Digest {
			t.Fatalf("tag %s: %v, digest %v, want %s", tag, err, desc, res.Digest)
		}
	}
	img, err := remote.Image(repo.Digest(res.Digest), opts...)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v", len(layers), err)
	}
	if d, _ := layers[0].Digest(); d.String() != digest {
		t.Fatalf("layer digest %s, want the artifact's %s", d, digest)
	}
	verified, err := ociartifact.Verify(repo.Digest(res.Digest), v, opts...)
	if err != nil {
		t.Fatalf("verifying what was pushed: %v", err)
	}
	if !bytes.Contains(verified.Statement, []byte(`"token":"***"`)) || !bytes.Contains(verified.Statement, []byte("0123456789abcdef0123456789abcdef01234567")) {
		t.Fatalf("provenance does not name the commit and the masked argument: %s", verified.Statement)
	}
	if res.Bytes <= 0 {
		t.Fatalf("bytes pushed %d", res.Bytes)
	}
}

// The same output pushed twice is the same OCI digest.
func TestPushIsReproducible(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	p := newPusher(t, true, ocipush.Options{})
	path, digest := artifact(t, "kind: ConfigMap\n")
	s, _ := keys(t)
	a, err := p.Push(testCtx(t), request(reg, path, digest, s))
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Push(testCtx(t), request(reg, path, digest, nil))
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest {
		t.Fatalf("digests %s and %s for the same artifact", a.Digest, b.Digest)
	}
}

// The guard's default refuses the host's own and private addresses: a push to 127.0.0.1 is
// refused before anything is sent.
func TestPushRefusesOwnAddresses(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	p := newPusher(t, false, ocipush.Options{})
	path, digest := artifact(t, "kind: ConfigMap\n")
	_, err := p.Push(testCtx(t), request(reg, path, digest, nil))
	var pe *ocipush.Error
	if !errors.As(err, &pe) || pe.Reason != ocipush.ReasonHostNotAllowed || !errors.Is(err, kclmod.ErrHostNotAllowed) {
		t.Fatalf("got %v, want HostNotAllowed", err)
	}
	if reg.Conns() != 0 {
		t.Fatalf("the registry saw %d connections", reg.Conns())
	}
}

// Wrong credentials: the registry's refusal, said without its words.
func TestPushWithWrongCredentials(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "tenant", "s3cret")
	p := newPusher(t, true, ocipush.Options{})
	path, digest := artifact(t, "kind: ConfigMap\n")
	req := request(reg, path, digest, nil)
	req.DockerConfig = kclmodtest.DockerConfigJSON(reg.Host, "tenant", "wrong")
	_, err := p.Push(testCtx(t), req)
	var pe *ocipush.Error
	if !errors.As(err, &pe) || pe.Reason != ocipush.ReasonRegistry || !strings.Contains(err.Error(), "refused the credentials") {
		t.Fatalf("got %v, want the registry's refusal of the credentials", err)
	}
}

// A registry that never answers holds the push until its timeout, then the process is killed.
func TestPushToAStalledRegistryTimesOut(t *testing.T) {
	stall := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-stall }))
	t.Cleanup(func() { close(stall); srv.Close() })
	p := newPusher(t, true, ocipush.Options{Limits: childproc.Limits{Timeout: 3 * time.Second}})
	path, digest := artifact(t, "kind: ConfigMap\n")
	req := ocipush.Request{Domain: "team-a", Repository: strings.TrimPrefix(srv.URL, "http://") + "/app", Insecure: true,
		Artifact: path, ArtifactDigest: digest, Meta: ociartifact.Meta{Source: "s", Revision: "r"}}
	_, err := p.Push(testCtx(t), req)
	var pe *ocipush.Error
	if !errors.As(err, &pe) || pe.Reason != ocipush.ReasonTimeout {
		t.Fatalf("got %v, want Timeout", err)
	}
}

// A registry that is down: a clear failure, nothing else.
func TestPushToARegistryThatIsDown(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	host := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	p := newPusher(t, true, ocipush.Options{})
	path, digest := artifact(t, "kind: ConfigMap\n")
	req := ocipush.Request{Domain: "team-a", Repository: host + "/app", Insecure: true,
		Artifact: path, ArtifactDigest: digest, Meta: ociartifact.Meta{Source: "s", Revision: "r"}}
	_, err := p.Push(testCtx(t), req)
	var pe *ocipush.Error
	if !errors.As(err, &pe) || pe.Reason != ocipush.ReasonRegistry || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("got %v, want the registry's failure", err)
	}
}

// A repository with a tag or digest is refused before anything is built.
func TestPushRefusesATaggedRepository(t *testing.T) {
	p := newPusher(t, true, ocipush.Options{})
	path, digest := artifact(t, "kind: ConfigMap\n")
	for _, repo := range []string{"127.0.0.1:5000/app:v1", "127.0.0.1:5000/app@sha256:" + strings.Repeat("0", 64)} {
		_, err := p.Push(testCtx(t), ocipush.Request{Repository: repo, Artifact: path, ArtifactDigest: digest,
			Meta: ociartifact.Meta{Source: "s", Revision: "r"}})
		var pe *ocipush.Error
		if !errors.As(err, &pe) || pe.Reason != ocipush.ReasonInvalid {
			t.Fatalf("%s: got %v, want InvalidRequest", repo, err)
		}
	}
}

// Pull fetches back the tarball that was pushed, byte for byte, within its bound, once its
// signature and provenance verify with the key; an unsigned artifact, another key, an image that
// is not a Flux artifact, or a layer over the bound, is refused.
func TestPullFetchesBackWhatWasPushed(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "tenant", "s3cret")
	p := newPusher(t, true, ocipush.Options{})
	path, digest := artifact(t, "kind: ConfigMap\n")
	s, _ := keys(t)
	res, err := p.Push(testCtx(t), request(reg, path, digest, s))
	if err != nil {
		t.Fatal(err)
	}
	pub := publicPEM(t, s)
	want, _ := os.ReadFile(path)
	req := ocipush.PullRequest{Domain: "team-a", Repository: res.Repository, Insecure: true,
		DockerConfig: reg.DockerConfigJSON(), Manifest: res.Digest, MaxBytes: int64(len(want)), PublicKey: pub}
	got, err := p.Pull(testCtx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(got.File)
	got.Remove()
	if !bytes.Equal(b, want) {
		t.Fatalf("pulled %d bytes, not the %d pushed", len(b), len(want))
	}
	if !bytes.Contains(got.Statement, []byte(`"token":"***"`)) {
		t.Fatalf("the statement is not the pushed provenance: %s", got.Statement)
	}
	if _, err := os.Stat(got.File); !os.IsNotExist(err) {
		t.Fatalf("Remove left %s: %v", got.File, err)
	}
	small := req
	small.MaxBytes = int64(len(want)) - 1
	if _, err := p.Pull(testCtx(t), small); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("pull over the bound: %v", err)
	}
	_, otherKey := keys(t)
	other := req
	other.PublicKey = publicPEM(t, otherKey)
	if _, err := p.Pull(testCtx(t), other); err == nil || !strings.Contains(err.Error(), "no signature verifies") {
		t.Fatalf("pull with another key: %v", err)
	}
	unsignedPath, unsignedDigest := artifact(t, "kind: Secret\n")
	u, err := p.Push(testCtx(t), request(reg, unsignedPath, unsignedDigest, nil))
	if err != nil {
		t.Fatal(err)
	}
	unsigned := req
	unsigned.Manifest = u.Digest
	if _, err := p.Pull(testCtx(t), unsigned); err == nil || !strings.Contains(err.Error(), "not signed") {
		t.Fatalf("pull of an unsigned artifact: %v", err)
	}
}

func publicPEM(t *testing.T, v signature.Verifier) []byte {
	t.Helper()
	pk, err := v.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	b, err := cryptoutils.MarshalPublicKeyToPEM(pk)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
