package kclmod_test

import (
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

// Attacks by a tenant's own dependency server, in this process (the ones that would kill it,
// such as a pack header lying about its object count, are in internal/depfetch, against the
// fetch process). Each was watched succeeding before the bound was added: the 1 GiB error body
// read whole, the tag list read whole, the 300 MiB pack landing in the cache, the marker echoed,
// the private package served to a tenant whose registry holds no blob, the .. sent as written.

// heapGrowth runs f and returns how much the live heap grew meanwhile, at its largest
// observation; reading whole a 1 GiB body shows up, reading 64 KiB of it does not.
func heapGrowth(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	if after.HeapSys < before.HeapSys {
		return 0
	}
	return after.HeapSys - before.HeapSys
}

// hostileOCIApp is a package depending on lib from the hostile registry at host.
func hostileOCIApp(t *testing.T, host, tag string) string {
	dep := fmt.Sprintf(`lib = { oci = "oci://%s/team/lib", tag = %q }`, host, tag)
	if tag == "" {
		dep = fmt.Sprintf(`lib = { oci = "oci://%s/team/lib" }`, host)
	}
	return kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{dep}, nil)
}

// A registry answering 404 with a 1 GiB body: the answer is refused by its status, and the body
// is not read beyond a small bound.
func TestHugeErrorBodyIsNotRead(t *testing.T) {
	srv := kclmodtest.ErrorServer(t, http.StatusNotFound, "NOT-FOUND ", 1<<30)
	app := hostileOCIApp(t, srv.Host, "1.0.0")
	var err error
	grew := heapGrowth(func() { _, err = newResolver(t, kclmod.Options{}).Resolve(ctx(t), app, app, kclmod.Credentials{}) })
	mustContain(t, err, "HTTP 404")
	mustNotContain(t, err, "NOT-FOUND")
	t.Logf("server wrote %d bytes of its 1 GiB answer; heap grew by %d bytes", srv.Written(), grew)
	if srv.Written() > 16<<20 || grew > 64<<20 {
		t.Fatalf("the client read %d bytes of a 1 GiB error body (heap +%d)", srv.Written(), grew)
	}
}

// A tag list of 512 MiB (a dependency without a version asks for it) fails at the bound.
func TestHugeTagListFailsAtTheBound(t *testing.T) {
	srv := kclmodtest.StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		if !strings.HasSuffix(r.URL.Path, "/tags/list") {
			http.NotFound(rw, r)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"name":"team/lib","tags":[`)
		kclmodtest.WriteRepeated(w, `"1.0.0-aaaaaaaaaaaaaaaaaaaaaaa",`, 512<<20)
		_, _ = io.WriteString(w, `"1.0.0"]}`)
	})
	app := hostileOCIApp(t, srv.Host, "")
	var err error
	grew := heapGrowth(func() { _, err = newResolver(t, kclmod.Options{}).Resolve(ctx(t), app, app, kclmod.Credentials{}) })
	mustContain(t, err, "listing the versions", "larger than")
	t.Logf("server wrote %d bytes of its 512 MiB tag list; heap grew by %d bytes", srv.Written(), grew)
	if srv.Written() > 32<<20 {
		t.Fatalf("the client read %d bytes of a 512 MiB tag list", srv.Written())
	}
}

// A server sending one byte every 300 ms (a drip, which no idle timeout catches) fails on the
// minimum transfer speed, registry and Git alike.
func TestDripFailsOnTheMinimumSpeed(t *testing.T) {
	drip := kclmodtest.StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) {
		body := strings.Repeat(" ", 1000)
		if strings.HasSuffix(r.URL.Path, "/info/refs") {
			rw.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
			body = kclmodtest.GitAdvertisementText
		}
		kclmodtest.Drip(w, rw, body, 300*time.Millisecond)
	})
	apps := map[string]string{
		"oci": hostileOCIApp(t, drip.Host, "1.0.0"),
		"git": gitApp(t, drip.Server.URL+"/lib.git"),
	}
	for kind, app := range apps {
		r := newResolver(t, kclmod.Options{MinSpeed: 100, LowSpeedTime: 2 * time.Second})
		start := time.Now()
		_, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{})
		took := time.Since(start)
		mustContain(t, err, "slower than 100 bytes/s")
		if took > 20*time.Second {
			t.Fatalf("%s: the drip held the fetch for %s", kind, took)
		}
		t.Logf("%s: failed after %s: %v", kind, took.Round(time.Millisecond), err)
	}
}

// A Git server sending a 300 MiB pack for a package under a 1 MiB bound: the download stops at
// the bound, counted while it arrives.
func TestGitPackCountedWhileDownloading(t *testing.T) {
	const blob = 300 << 20
	srv := kclmodtest.FakeGitServer(t, func(w io.Writer) {
		_, _ = w.Write(kclmodtest.PackHeader(1))
		// a blob object's header: type 3, then the size in 4 + 7*n bits
		hdr := []byte{0x80 | 3<<4 | byte(blob&0x0f)}
		for s := blob >> 4; s > 0; s >>= 7 {
			b := byte(s & 0x7f)
			if s>>7 > 0 {
				b |= 0x80
			}
			hdr = append(hdr, b)
		}
		if _, err := w.Write(hdr); err != nil {
			return
		}
		zw, _ := zlib.NewWriterLevel(w, zlib.NoCompression)
		kclmodtest.WriteRepeated(zw, "0123456789abcdef", blob)
		_ = zw.Close()
	})
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0",
		[]string{fmt.Sprintf(`lib = { git = "%s/lib.git", branch = "main" }`, srv.Server.URL)}, nil)
	cache := t.TempDir()
	_, err := newResolver(t, kclmod.Options{CacheDir: cache, MaxPackageBytes: 1 << 20}).Resolve(ctx(t), app, app, kclmod.Credentials{})
	mustContain(t, err, "larger than")
	t.Logf("server wrote %d bytes of its 300 MiB pack: %v", srv.Written(), err)
	if srv.Written() > 16<<20 {
		t.Fatalf("the client read %d bytes of a pack under a 1 MiB bound", srv.Written())
	}
	if n := countTree(t, cache+"/entries"); n != 0 {
		t.Fatalf("%d cache entries after the refusal", n)
	}
}

// An answer other than 200/401/403/404 is reported by its status code; its body, which an
// internal service would fill with its secrets, appears nowhere.
func TestErrorBodyNeverEchoed(t *testing.T) {
	const marker = "INTERNAL-SERVICE-RESPONSE: db_password=hunter2"
	srv := kclmodtest.ErrorServer(t, http.StatusBadRequest, marker, int64(len(marker)))
	for kind, app := range map[string]string{
		"oci": hostileOCIApp(t, srv.Host, "1.0.0"),
		"git": gitApp(t, srv.Server.URL+"/lib.git"),
	} {
		_, err := newResolver(t, kclmod.Options{}).Resolve(ctx(t), app, app, kclmod.Credentials{})
		mustContain(t, err, "HTTP 400")
		if strings.Contains(err.Error(), "db_password") || strings.Contains(err.Error(), "INTERNAL") {
			t.Fatalf("%s: the error echoes the answer: %v", kind, err)
		}
	}
}

// A repository or reference with .. or empty segments is refused before any request.
func TestDotDotRepositoryRefusedBeforeAnyRequest(t *testing.T) {
	srv := kclmodtest.StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) {
		http.NotFound(rw, r)
	})
	for _, dep := range []string{
		fmt.Sprintf(`lib = { oci = "oci://%s/../../admin/x", tag = "1.0.0" }`, srv.Host),
		fmt.Sprintf(`lib = { oci = "oci://%s/team//x", tag = "1.0.0" }`, srv.Host),
		fmt.Sprintf(`lib = { oci = "oci://%s/team/x", tag = "../1" }`, srv.Host),
		fmt.Sprintf(`lib = { repo = "../admin/x", reg = "%s", tag = "1.0.0" }`, srv.Host),
		fmt.Sprintf(`lib = { git = "%s/a/../../admin.git", tag = "v1" }`, srv.Server.URL),
		fmt.Sprintf(`lib = { git = "%s/lib.git", branch = "../main" }`, srv.Server.URL),
	} {
		app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{dep}, nil)
		_, err := newResolver(t, kclmod.Options{}).Resolve(ctx(t), app, app, kclmod.Credentials{})
		mustContain(t, err, "invalid")
		if n := srv.Requests(); n != 0 {
			t.Fatalf("%s: %d requests reached the server: %v", dep, n, err)
		}
	}
}

// Tenant A renders a private package with its credentials; tenant B's own registry replays
// A's manifest (its digest is all B needs) and holds no blob. B never gets A's content: the
// cache is keyed by registry and repository too, and B's registry is asked for the layer.
func TestReplayedManifestDoesNotServeAnotherTenantsPackage(t *testing.T) {
	private := kclmodtest.StartRegistry(t, "tenant-a", "a-password")
	lib := kclmodtest.WritePackage(t, t.TempDir(), "lib", "1.0.0", nil, map[string]string{"lib.k": `secret = "A-PRIVATE-CONTENT"` + "\n"})
	pushed := push(t, private, "team/lib:1.0.0", lib, kclmodtest.PushOptions{})
	manifest := fetchManifest(t, private, "team/lib", "1.0.0")

	cache := t.TempDir()
	appA := hostileOCIApp(t, private.Host, "1.0.0")
	resA := resolve(t, newResolver(t, kclmod.Options{CacheDir: cache}), appA, kclmod.Credentials{DockerConfigJSON: private.DockerConfigJSON()})
	if !strings.Contains(readFile(t, pkgByName(t, resA, "lib").Path+"/lib.k"), "A-PRIVATE-CONTENT") {
		t.Fatal("tenant A did not get its package")
	}
	resA.Release()

	replay := kclmodtest.StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/manifests/") {
			rw.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
			rw.Header().Set("Docker-Content-Digest", pushed.Digest)
			_, _ = w.Write(manifest)
			return
		}
		if r.URL.Path == "/v2/" {
			return
		}
		http.NotFound(rw, r)
	})
	appB := hostileOCIApp(t, replay.Host, "1.0.0")
	res, err := newResolver(t, kclmod.Options{CacheDir: cache}).Resolve(ctx(t), appB, appB, kclmod.Credentials{})
	if err == nil {
		t.Fatalf("tenant B got a package from a registry without its blob: %s", readFile(t, pkgByName(t, res, "lib").Path+"/lib.k"))
	}
	mustContain(t, err, "fetching the package")
}

func fetchManifest(t *testing.T, reg *kclmodtest.Registry, repo, tag string) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, reg.Server.URL+"/v2/"+repo+"/manifests/"+tag, nil)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	req.SetBasicAuth(reg.Username, reg.Password)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("manifest: %d %v", resp.StatusCode, err)
	}
	return b
}

// A package fetched with credentials is served from the cache to another caller only once the
// registry, asked with that caller's credentials, lets it read the layer. The registry here
// shows manifests to anyone (a front adds credentials to manifest requests) and layers to
// tenant A only.
func TestCachedPrivatePackageConfirmedWithTheCallersCredentials(t *testing.T) {
	private := kclmodtest.StartRegistry(t, "tenant-a", "a-password")
	lib := kclmodtest.WritePackage(t, t.TempDir(), "lib", "1.0.0", nil, map[string]string{"lib.k": "v = 1\n"})
	push(t, private, "team/lib:1.0.0", lib, kclmodtest.PushOptions{})
	backend, _ := url.Parse(private.Server.URL)
	proxy := httputil.NewSingleHostReverseProxy(backend)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/manifests/") || r.URL.Path == "/v2/" {
			r.SetBasicAuth(private.Username, private.Password)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	host := strings.TrimPrefix(front.URL, "http://")
	app := hostileOCIApp(t, host, "1.0.0")
	cache := t.TempDir()
	credsA := kclmod.Credentials{DockerConfigJSON: kclmodtest.DockerConfigJSON(host, private.Username, private.Password)}
	resolve(t, newResolver(t, kclmod.Options{CacheDir: cache}), app, credsA).Release()

	_, err := newResolver(t, kclmod.Options{CacheDir: cache}).Resolve(ctx(t), app, app, kclmod.Credentials{})
	mustContain(t, err, "confirming access to the cached package", "requires authentication")
	// tenant A still is
	res := resolve(t, newResolver(t, kclmod.Options{CacheDir: cache}), app, credsA)
	if p := pkgByName(t, res, "lib"); !p.Cached {
		t.Fatalf("tenant A's second resolve was not served from the cache: %+v", p)
	}
}

// A pack header claiming 4,294,967,295 objects is refused as it arrives, before go-git
// allocates for them (which stops the Go runtime; the fetch process's memory limit is the last
// line, internal/depfetch). Raw after the NAK and in side-band pkt-lines alike.
func TestLyingPackHeaderRefusedAsItArrives(t *testing.T) {
	raw := kclmodtest.LyingPackServer(t, 0xFFFFFFFF)
	sideband := kclmodtest.FakeGitServer(t, func(w io.Writer) {
		payload := "\x01" + string(kclmodtest.PackHeader(0xFFFFFFFF))
		_, _ = fmt.Fprintf(w, "%04x%s", len(payload)+4, payload)
		kclmodtest.WriteRepeated(w, "0005\x01\x00", 1<<20)
	})
	for kind, srv := range map[string]*kclmodtest.Hostile{"raw": raw, "side-band": sideband} {
		app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0",
			[]string{fmt.Sprintf(`lib = { git = "%s/git/x", branch = "main" }`, srv.Server.URL)}, nil)
		_, err := newResolver(t, kclmod.Options{}).Resolve(ctx(t), app, app, kclmod.Credentials{})
		mustContain(t, err, "claims 4294967295 objects", "more than the 410000")
		t.Logf("%s: %v", kind, err)
	}
}
