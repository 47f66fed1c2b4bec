package kclmod_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

func TestOCIDefaultRegistryAndCache(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	pushed := push(t, reg, "kcl-lang/k8s:1.31.2", k8sPackage(t, "1.31.2"), kclmodtest.PushOptions{})
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{`k8s = "1.31.2"`}, nil)
	r := newResolver(t, kclmod.Options{DefaultRegistry: reg.Host})

	res := resolve(t, r, app, kclmod.Credentials{})
	k8s := pkgByName(t, res, "k8s")
	if k8s.Source != kclmod.SourceOCI || k8s.Digest != pushed.Digest || k8s.Sum != pushed.Sum || k8s.Cached {
		t.Fatalf("k8s: %+v (pushed %+v)", k8s, pushed)
	}
	if k8s.Location != "oci://"+reg.Host+"/kcl-lang/k8s:1.31.2" {
		t.Errorf("location %s", k8s.Location)
	}
	if !strings.Contains(readFile(t, filepath.Join(k8s.Path, "api/core/v1/config_map.k")), "schema ConfigMap") {
		t.Fatal("package content missing")
	}
	if res.Downloads != 1 || res.CacheHits != 0 || reg.BlobGets() != 1 {
		t.Fatalf("first resolve: downloads %d hits %d blob GETs %d", res.Downloads, res.CacheHits, reg.BlobGets())
	}
	if ext := res.ExternalPkgs(); len(ext) != 1 || ext[0].PkgName != "k8s" || ext[0].PkgPath != k8s.Path {
		t.Fatalf("external packages: %+v", ext)
	}

	// A second resolve (another resolver on the same cache, as another process would be) does
	// not download again.
	r2 := newResolver(t, kclmod.Options{DefaultRegistry: reg.Host, CacheDir: cacheDirOf(t, r, res)})
	res2 := resolve(t, r2, app, kclmod.Credentials{})
	if k := pkgByName(t, res2, "k8s"); !k.Cached || k.Path != k8s.Path {
		t.Fatalf("second resolve: %+v", k)
	}
	res3 := resolve(t, r, app, kclmod.Credentials{})
	if reg.BlobGets() != 1 || res2.Downloads != 0 || res3.Downloads != 0 || res3.CacheHits != 1 {
		t.Fatalf("cache not used: blob GETs %d, downloads %d/%d", reg.BlobGets(), res2.Downloads, res3.Downloads)
	}
	if s := r.Stats(); s.Downloads != 1 || s.CacheHits != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// cacheDirOf returns the cache directory holding a resolved package.
func cacheDirOf(t *testing.T, _ *kclmod.Resolver, res *kclmod.Result) string {
	t.Helper()
	for _, p := range res.Packages {
		if p.Source == kclmod.SourceOCI || p.Source == kclmod.SourceGit {
			// <cache>/entries/<key>/pkg
			return filepath.Dir(filepath.Dir(filepath.Dir(p.Path)))
		}
	}
	t.Fatal("no cached package")
	return ""
}

func TestOCIURLFormGzipAndLatest(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	push(t, reg, "team/lib:1.0.0", kclmodtest.WritePackage(t, t.TempDir(), "lib", "1.0.0", nil, map[string]string{"lib.k": "v = 1\n"}), kclmodtest.PushOptions{Gzip: true})
	push(t, reg, "team/lib:1.2.0", kclmodtest.WritePackage(t, t.TempDir(), "lib", "1.2.0", nil, map[string]string{"lib.k": "v = 12\n"}), kclmodtest.PushOptions{})
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{
		fmt.Sprintf(`lib = { oci = "oci://%s/team/lib", tag = "1.0.0" }`, reg.Host),
		fmt.Sprintf(`latest = { oci = "oci://%s/team/lib" }`, reg.Host),
	}, nil)
	res := resolve(t, newResolver(t, kclmod.Options{}), app, kclmod.Credentials{})
	if got := readFile(t, filepath.Join(pkgByName(t, res, "lib").Path, "lib.k")); got != "v = 1\n" {
		t.Errorf("gzip layer: %q", got)
	}
	latest := pkgByName(t, res, "latest")
	if latest.Version != "1.2.0" || latest.Location != "oci://"+reg.Host+"/team/lib:1.2.0" || readFile(t, filepath.Join(latest.Path, "lib.k")) != "v = 12\n" {
		t.Errorf("latest: %+v", latest)
	}
}

func TestPrivateRegistry(t *testing.T) {
	const user, pass = "robot", "s3cret-registry-password"
	reg := kclmodtest.StartRegistry(t, user, pass)
	push(t, reg, "private/k8s:1.31.2", k8sPackage(t, "1.31.2"), kclmodtest.PushOptions{})
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0",
		[]string{fmt.Sprintf(`k8s = { oci = "oci://%s/private/k8s", tag = "1.31.2" }`, reg.Host)}, nil)
	r := newResolver(t, kclmod.Options{})

	_, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{})
	mustContain(t, err, `dependency "k8s"`, "registry "+reg.Host+" requires authentication", "HTTP 401", "no credentials were given")

	_, err = r.Resolve(ctx(t), app, app, kclmod.Credentials{DockerConfigJSON: kclmodtest.DockerConfigJSON(reg.Host, user, "wrong-password-xyz")})
	mustContain(t, err, `dependency "k8s"`, "refused the credentials")
	mustNotContain(t, err, "wrong-password-xyz", pass)

	res := resolve(t, r, app, kclmod.Credentials{DockerConfigJSON: reg.DockerConfigJSON()})
	if k := pkgByName(t, res, "k8s"); k.Source != kclmod.SourceOCI {
		t.Fatalf("%+v", k)
	}
	// The cache does not let a caller without credentials read what another one downloaded.
	_, err = r.Resolve(ctx(t), app, app, kclmod.Credentials{})
	mustContain(t, err, "requires authentication")
}

func TestGitDependency(t *testing.T) {
	gs := kclmodtest.StartGitServer(t)
	src := kclmodtest.WritePackage(t, t.TempDir(), "helpers", "0.1.0", nil, map[string]string{
		"helpers.k": "greeting = \"hello\"\n", ".gitignore": "x\n"})
	first := gs.CreateRepo("helpers", src)
	tagged := gs.Tag("helpers", "v0.1.0")
	head := gs.Commit("helpers", map[string]string{"helpers.k": "greeting = \"hi\"\n"})
	if tagged != first {
		t.Fatal("tag")
	}
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{
		fmt.Sprintf(`helpers = { git = "%s", tag = "v0.1.0" }`, gs.URL("helpers")),
		fmt.Sprintf(`bycommit = { git = "%s", commit = "%s" }`, gs.URL("helpers"), first),
		fmt.Sprintf(`bybranch = { git = "%s", branch = "main" }`, gs.URL("helpers")),
	}, nil)
	r := newResolver(t, kclmod.Options{})
	res := resolve(t, r, app, kclmod.Credentials{})
	h := pkgByName(t, res, "helpers")
	if h.Source != kclmod.SourceGit || h.Digest != first || readFile(t, filepath.Join(h.Path, "helpers.k")) != "greeting = \"hello\"\n" {
		t.Fatalf("tag: %+v", h)
	}
	if _, err := os.Stat(filepath.Join(h.Path, ".git")); !os.IsNotExist(err) {
		t.Error(".git must not be kept")
	}
	if c := pkgByName(t, res, "bycommit"); c.Digest != first || c.Path != h.Path {
		t.Errorf("commit: %+v (same commit and URL: same cache entry as the tag)", c)
	}
	if b := pkgByName(t, res, "bybranch"); b.Digest != head || readFile(t, filepath.Join(b.Path, "helpers.k")) != "greeting = \"hi\"\n" {
		t.Errorf("branch: %+v", b)
	}
	fetches := gs.Fetches()
	res2 := resolve(t, r, app, kclmod.Credentials{})
	if gs.Fetches() != fetches || res2.Downloads != 0 || res2.CacheHits != 3 {
		t.Fatalf("second resolve fetched %d times, %d downloads", gs.Fetches()-fetches, res2.Downloads)
	}

	// a short commit id is only known after a clone, which happens on every resolve
	short := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{
		fmt.Sprintf(`short = { git = "%s", commit = "%s" }`, gs.URL("helpers"), first[:8])}, nil)
	if s := pkgByName(t, resolve(t, r, short, kclmod.Credentials{}), "short"); s.Digest != first || s.Path != h.Path {
		t.Errorf("short commit: %+v", s)
	}
}

func TestGitPackageInRepository(t *testing.T) {
	gs := kclmodtest.StartGitServer(t)
	repo := t.TempDir()
	kclmodtest.WritePackage(t, filepath.Join(repo, "pkgs", "a"), "a", "0.1.0", nil, map[string]string{"a.k": "a = 1\n"})
	kclmodtest.WritePackage(t, filepath.Join(repo, "pkgs", "b"), "b", "0.2.0", nil, map[string]string{"b.k": "b = 2\n"})
	gs.CreateRepo("mono", repo)
	gs.Tag("mono", "v1")
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0",
		[]string{fmt.Sprintf(`b = { git = "%s", tag = "v1", package = "b" }`, gs.URL("mono"))}, nil)
	b := pkgByName(t, resolve(t, newResolver(t, kclmod.Options{}), app, kclmod.Credentials{}), "b")
	if filepath.Base(b.Path) != "b" || readFile(t, filepath.Join(b.Path, "b.k")) != "b = 2\n" {
		t.Fatalf("%+v", b)
	}
	if want, _ := kclmod.Checksum(b.Path); b.Sum != want {
		t.Fatalf("sum of the package directory: %s, want %s", b.Sum, want)
	}
}

func TestPrivateGit(t *testing.T) {
	gs := kclmodtest.StartGitServer(t)
	gs.Token = "tok-123-secret"
	src := kclmodtest.WritePackage(t, t.TempDir(), "priv", "0.1.0", nil, map[string]string{"priv.k": "x = 1\n"})
	gs.CreateRepo("priv", src)
	gs.Tag("priv", "v1")
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0",
		[]string{fmt.Sprintf(`priv = { git = "%s", tag = "v1" }`, gs.URL("priv"))}, nil)
	r := newResolver(t, kclmod.Options{})
	withCreds := func(host string, a kclmod.GitAuth) kclmod.Credentials {
		return kclmod.Credentials{Git: map[string]kclmod.GitAuth{host: a}}
	}

	_, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{})
	mustContain(t, err, `dependency "priv"`, "authentication required", "no credentials were given for "+gs.Host())

	// The server is plain http: credentials are not sent unless marked insecure, and then only
	// to their exact host and port (no port: 80 for http).
	for _, c := range []kclmod.Credentials{
		withCreds("example.com", kclmod.GitAuth{BearerToken: gs.Token, Insecure: true}),
		withCreds(gs.Host(), kclmod.GitAuth{BearerToken: gs.Token}),
		withCreds("127.0.0.1", kclmod.GitAuth{BearerToken: gs.Token, Insecure: true}),
		withCreds("127.0.0.1:1", kclmod.GitAuth{BearerToken: gs.Token, Insecure: true}),
	} {
		_, err = r.Resolve(ctx(t), app, app, c)
		mustContain(t, err, `dependency "priv"`, "authentication required")
		mustNotContain(t, err, gs.Token)
	}
	mustContain(t, err, "no credentials were given")
	_, err = r.Resolve(ctx(t), app, app, withCreds(gs.Host(), kclmod.GitAuth{BearerToken: gs.Token}))
	mustContain(t, err, "only sent over https unless marked insecure")
	if n := gs.AuthorizationHeaders(); n != 0 {
		t.Fatalf("%d requests carried credentials", n)
	}

	_, err = r.Resolve(ctx(t), app, app, withCreds(gs.Host(), kclmod.GitAuth{BearerToken: "nope-wrong", Insecure: true}))
	mustContain(t, err, `dependency "priv"`, "refused the credentials")
	mustNotContain(t, err, "nope-wrong", gs.Token)

	res := resolve(t, r, app, withCreds(gs.Host(), kclmod.GitAuth{BearerToken: gs.Token, Insecure: true}))
	if p := pkgByName(t, res, "priv"); p.Source != kclmod.SourceGit {
		t.Fatalf("%+v", p)
	}

	gs.Token, gs.Username, gs.Password = "", "git-user", "git-pass-secret"
	auth, ok := kclmod.GitAuthFromSecretData(map[string][]byte{"username": []byte("git-user"), "password": []byte("git-pass-secret"), "insecure": []byte("true")})
	if !ok || !auth.Insecure {
		t.Fatalf("secret data: %+v", auth)
	}
	res = resolve(t, r, app, withCreds(gs.Host(), auth))
	if p := pkgByName(t, res, "priv"); !p.Cached {
		t.Fatalf("basic auth, cached: %+v", p)
	}
}

func TestLocalPathDependency(t *testing.T) {
	src := t.TempDir()
	kclmodtest.WritePackage(t, filepath.Join(src, "libs", "common"), "common", "0.1.0", nil, map[string]string{"common.k": "c = 1\n"})
	app := kclmodtest.WritePackage(t, filepath.Join(src, "apps", "web"), "web", "0.1.0", []string{`common = { path = "../../libs/common" }`}, nil)
	r := newResolver(t, kclmod.Options{ForbidRemote: true})
	res, err := r.Resolve(ctx(t), app, src, kclmod.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Release()
	c := pkgByName(t, res, "common")
	if c.Source != kclmod.SourcePath || c.Location != "libs/common" || filepath.Base(c.Path) != "common" {
		t.Fatalf("%+v", c)
	}
	// the same package with the source root at the app: the dependency leaves it
	_, err = r.Resolve(ctx(t), app, app, kclmod.Credentials{})
	mustContain(t, err, `dependency "common"`, "outside the source")
	// a package directory without kcl.mod uses the nearest one above it
	if err := os.MkdirAll(filepath.Join(app, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	res2, err := r.Resolve(ctx(t), filepath.Join(app, "sub"), src, kclmod.Credentials{})
	if err != nil || len(res2.Packages) != 1 || res2.ModDir != app {
		t.Fatalf("nearest kcl.mod: %v %+v", err, res2)
	}
}

func TestVendoredWithRemoteForbidden(t *testing.T) {
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{
		`k8s = "1.31.2"`,
		`helpers = { git = "https://git.example.invalid/helpers.git", tag = "v0.1.0" }`,
	}, nil)
	vk8s := filepath.Join(app, "vendor", "k8s_1.31.2")
	kclmodtest.WritePackage(t, vk8s, "k8s", "1.31.2", []string{`base = "0.2.0"`}, map[string]string{"api/core/v1/config_map.k": "schema ConfigMap:\n    kind: str\n"})
	// a transitive dependency of a vendored package, vendored flat, as kpm does
	kclmodtest.WritePackage(t, filepath.Join(app, "vendor", "base_0.2.0"), "base", "0.2.0", nil, map[string]string{"base.k": "b = 1\n"})
	kclmodtest.WritePackage(t, filepath.Join(app, "vendor", "helpers_v0.1.0"), "helpers", "0.1.0", nil, map[string]string{"h.k": "h = 1\n"})
	sum, err := kclmod.Checksum(vk8s)
	if err != nil {
		t.Fatal(err)
	}
	writeLock(t, app, kclmodtest.OCILock("k8s", "1.31.2", sum, "ghcr.io", "kcl-lang/k8s"))
	r := newResolver(t, kclmod.Options{ForbidRemote: true})
	res := resolve(t, r, app, kclmod.Credentials{})
	k := pkgByName(t, res, "k8s")
	if k.Source != kclmod.SourceVendor || k.Location != "vendor/k8s_1.31.2" || !k.SumVerified || k.Sum != sum {
		t.Fatalf("k8s: %+v", k)
	}
	if b := pkgByName(t, res, "base"); b.Source != kclmod.SourceVendor || b.RequiredBy != "k8s" {
		t.Fatalf("base: %+v", b)
	}
	if h := pkgByName(t, res, "helpers"); h.Source != kclmod.SourceVendor {
		t.Fatalf("helpers: %+v", h)
	}
	if res.Downloads != 0 {
		t.Fatal("nothing may be downloaded")
	}

	// a dependency that is not vendored is an error naming it
	app2 := kclmodtest.WritePackage(t, t.TempDir(), "app2", "0.1.0", []string{`k8s = "1.31.2"`, `extra = "1.0.0"`}, nil)
	kclmodtest.WritePackage(t, filepath.Join(app2, "vendor", "k8s_1.31.2"), "k8s", "1.31.2", nil, nil)
	_, err = r.Resolve(ctx(t), app2, app2, kclmod.Credentials{})
	mustContain(t, err, `dependency "extra"`, "oci://ghcr.io/kcl-lang/extra:1.0.0", "not vendored", "remote dependencies are forbidden")

	// a vendored package that does not match the lock is refused
	write(t, vk8s, map[string]string{"api/core/v1/config_map.k": "schema ConfigMap:\n    kind: int\n"})
	_, err = r.Resolve(ctx(t), app, app, kclmod.Credentials{})
	mustContain(t, err, `dependency "k8s"`, "checksum mismatch", sum, "kcl.mod.lock")
}

func TestTransitiveDependencies(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	gs := kclmodtest.StartGitServer(t)
	gs.CreateRepo("util", kclmodtest.WritePackage(t, t.TempDir(), "util", "0.1.0", nil, map[string]string{"util.k": "u = 1\n"}))
	gs.Tag("util", "v0.1.0")
	push(t, reg, "kcl-lang/base:0.2.0", kclmodtest.WritePackage(t, t.TempDir(), "base", "0.2.0", nil, map[string]string{"base.k": "b = 1\n"}), kclmodtest.PushOptions{})
	push(t, reg, "kcl-lang/mid:1.0.0", kclmodtest.WritePackage(t, t.TempDir(), "mid", "1.0.0", []string{
		`base = "0.1.0"`,
		fmt.Sprintf(`util = { git = "%s", tag = "v0.1.0" }`, gs.URL("util")),
		`inner = { path = "inner" }`,
	}, map[string]string{"mid.k": "m = 1\n", "inner/kcl.mod": "[package]\nname = \"inner\"\nversion = \"0.0.1\"\n"}), kclmodtest.PushOptions{})
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{`mid = "1.0.0"`, `base = "0.2.0"`}, nil)
	res := resolve(t, newResolver(t, kclmod.Options{DefaultRegistry: reg.Host}), app, kclmod.Credentials{})
	var names []string
	for _, p := range res.Packages {
		names = append(names, p.Name+"<"+p.RequiredBy)
	}
	if got := strings.Join(names, " "); got != "base< mid< inner<mid util<mid" {
		t.Fatalf("packages: %s", got)
	}
	if in := pkgByName(t, res, "inner"); in.Source != kclmod.SourcePath || in.Path != filepath.Join(pkgByName(t, res, "mid").Path, "inner") {
		t.Fatalf("inner: %+v", in)
	}
	// the root's base 0.2.0 wins over mid's 0.1.0
	if b := pkgByName(t, res, "base"); b.Version != "0.2.0" || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "base:0.1.0 ignored") {
		t.Fatalf("conflict: %+v %v", b, res.Warnings)
	}

	// a path dependency leaving a downloaded package is refused
	push(t, reg, "kcl-lang/escape:1.0.0", kclmodtest.WritePackage(t, t.TempDir(), "escape", "1.0.0", []string{`x = { path = "../.." }`}, nil), kclmodtest.PushOptions{})
	app2 := kclmodtest.WritePackage(t, t.TempDir(), "app2", "0.1.0", []string{`escape = "1.0.0"`}, nil)
	_, err := newResolver(t, kclmod.Options{DefaultRegistry: reg.Host}).Resolve(ctx(t), app2, app2, kclmod.Credentials{})
	mustContain(t, err, `dependency "x" of "escape"`, "outside the source")
}

func TestLockChecksum(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	pushed := push(t, reg, "kcl-lang/k8s:1.31.2", k8sPackage(t, "1.31.2"), kclmodtest.PushOptions{})
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{`k8s = "1.31.2"`}, nil)
	lock := func(sum string) string { return kclmodtest.OCILock("k8s", "1.31.2", sum, "ghcr.io", "kcl-lang/k8s") }
	writeLock(t, app, lock(pushed.Sum))
	r := newResolver(t, kclmod.Options{DefaultRegistry: reg.Host})
	if k := pkgByName(t, resolve(t, r, app, kclmod.Credentials{}), "k8s"); !k.SumVerified {
		t.Fatalf("%+v", k)
	}

	const bad = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
	writeLock(t, app, lock(bad))
	_, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{})
	mustContain(t, err, `dependency "k8s"`, "checksum mismatch", "kcl.mod.lock expects sum \""+bad+"\"", pushed.Sum)

	// a lock entry for another version is stale: it is not checked
	writeLock(t, app, strings.ReplaceAll(lock(bad), "1.31.2", "1.30.0"))
	if k := pkgByName(t, resolve(t, r, app, kclmod.Credentials{}), "k8s"); k.SumVerified {
		t.Fatalf("stale lock entry used: %+v", k)
	}

	// a package whose content does not match the lock, served with the lock's sum as its
	// manifest annotation: the registry chooses its annotations, so only the files count
	push(t, reg, "kcl-lang/k8s:1.31.3", k8sPackage(t, "1.31.3"), kclmodtest.PushOptions{Sum: "annotated-sum="})
	app2 := kclmodtest.WritePackage(t, t.TempDir(), "app2", "0.1.0", []string{`k8s = "1.31.3"`}, nil)
	writeLock(t, app2, kclmodtest.OCILock("k8s", "1.31.3", "annotated-sum=", "ghcr.io", "kcl-lang/k8s"))
	_, err = r.Resolve(ctx(t), app2, app2, kclmod.Credentials{})
	mustContain(t, err, "checksum mismatch", `expects sum "annotated-sum="`)
}

func TestConcurrentResolvesDownloadOnce(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	push(t, reg, "kcl-lang/k8s:1.31.2", k8sPackage(t, "1.31.2"), kclmodtest.PushOptions{})
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{`k8s = "1.31.2"`}, nil)
	cache := t.TempDir()
	// two resolvers on one cache, as two processes would share it
	rs := []*kclmod.Resolver{
		newResolver(t, kclmod.Options{DefaultRegistry: reg.Host, CacheDir: cache}),
		newResolver(t, kclmod.Options{DefaultRegistry: reg.Host, CacheDir: cache}),
	}
	const n = 8
	var wg sync.WaitGroup
	results := make([]*kclmod.Result, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = rs[i%2].Resolve(ctx(t), app, app, kclmod.Credentials{})
		}()
	}
	wg.Wait()
	downloads := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		defer results[i].Release()
		downloads += results[i].Downloads
		if results[i].Packages[0].Path != results[0].Packages[0].Path {
			t.Fatal("different paths")
		}
	}
	if downloads != 1 || reg.BlobGets() != 1 {
		t.Fatalf("downloads %d, blob GETs %d", downloads, reg.BlobGets())
	}
}

func TestCacheEviction(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	filler := strings.Repeat("x", 1000)
	var apps []string
	for i := range 4 {
		name := fmt.Sprintf("p%d", i)
		push(t, reg, "kcl-lang/"+name+":1.0.0", kclmodtest.WritePackage(t, t.TempDir(), name, "1.0.0", nil, map[string]string{"data.k": "d = \"" + filler + "\"\n"}), kclmodtest.PushOptions{})
		apps = append(apps, kclmodtest.WritePackage(t, t.TempDir(), "app"+name, "0.1.0", []string{name + ` = "1.0.0"`}, nil))
	}
	// each package is about 1.1 KB: the cache holds two
	r := newResolver(t, kclmod.Options{DefaultRegistry: reg.Host, MaxCacheBytes: 2500})
	resolveOnce := func(i int) *kclmod.Result {
		res, err := r.Resolve(ctx(t), apps[i], apps[i], kclmod.Credentials{})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	paths := map[int]string{}
	for i := range 3 {
		res := resolveOnce(i)
		paths[i] = res.Packages[0].Path
		res.Release()
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if exists(paths[0]) || !exists(paths[1]) || !exists(paths[2]) {
		t.Fatalf("the least recently used entry must go: %v %v %v", exists(paths[0]), exists(paths[1]), exists(paths[2]))
	}
	// p1 is pinned (in use) and the least recently used: p2 goes instead
	held := resolveOnce(1)
	res2 := resolveOnce(2)
	res2.Release()
	res3 := resolveOnce(3)
	res3.Release()
	if !exists(paths[1]) || exists(paths[2]) {
		t.Fatalf("p1 is pinned, p2 must go: p1 %v p2 %v", exists(paths[1]), exists(paths[2]))
	}
	held.Release()
	// p0 comes back with a new download
	before := reg.BlobGets()
	res0 := resolveOnce(0)
	defer res0.Release()
	if res0.Downloads != 1 || reg.BlobGets() != before+1 {
		t.Fatal("an evicted package must be downloaded again")
	}
}

// A poisoned cache entry (a file changed after the download, as an unconfined program could do)
// is caught on the next resolve: the sum is computed from the files, not read from meta.json.
func TestPoisonedCacheEntryIsCaught(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	pushed := push(t, reg, "kcl-lang/k8s:1.31.2", k8sPackage(t, "1.31.2"), kclmodtest.PushOptions{})
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{`k8s = "1.31.2"`}, nil)
	writeLock(t, app, kclmodtest.OCILock("k8s", "1.31.2", pushed.Sum, "ghcr.io", "kcl-lang/k8s"))
	cache := t.TempDir()
	r := newResolver(t, kclmod.Options{DefaultRegistry: reg.Host, CacheDir: cache})
	k := pkgByName(t, resolve(t, r, app, kclmod.Credentials{}), "k8s")
	target := filepath.Join(k.Path, "api", "core", "v1", "config_map.k")
	if err := os.WriteFile(target, []byte("schema ConfigMap:\n    evil: str = \"x\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{})
	mustContain(t, err, "checksum mismatch", pushed.Sum)
}

// Stage links the packages beside the render's source; the staged files are what the sum covers.
func TestStageLinksPackagesOutOfTheCache(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	push(t, reg, "kcl-lang/k8s:1.31.2", k8sPackage(t, "1.31.2"), kclmodtest.PushOptions{})
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{`k8s = "1.31.2"`}, nil)
	cache, stage := t.TempDir(), t.TempDir()
	res := resolve(t, newResolver(t, kclmod.Options{DefaultRegistry: reg.Host, CacheDir: cache}), app, kclmod.Credentials{})
	if err := res.Stage(stage); err != nil {
		t.Fatal(err)
	}
	k := pkgByName(t, res, "k8s")
	if !strings.HasPrefix(k.Path, stage+string(filepath.Separator)) {
		t.Fatalf("package not staged: %s", k.Path)
	}
	sum, err := kclmod.Checksum(k.Path)
	if err != nil || sum != k.Sum {
		t.Fatalf("staged copy sum %q (%v), resolved %q", sum, err, k.Sum)
	}
	for _, e := range res.ExternalPkgs() {
		if strings.HasPrefix(e.PkgPath, cache) {
			t.Fatalf("an external still points into the cache: %+v", e)
		}
	}
}

// A dependency without a tag takes the registry's highest version by semver precedence:
// rc.10 after rc.9, whatever order the registry lists them in.
func TestLatestIsSemverPrecedence(t *testing.T) {
	reg := kclmodtest.StartRegistry(t, "", "")
	for _, v := range []string{"1.0.0-rc.9", "1.0.0-rc.10", "0.9.0"} {
		push(t, reg, "team/lib:"+v, kclmodtest.WritePackage(t, t.TempDir(), "lib", v, nil, map[string]string{"lib.k": fmt.Sprintf("v = %q\n", v)}), kclmodtest.PushOptions{})
	}
	app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{fmt.Sprintf(`lib = { oci = "oci://%s/team/lib" }`, reg.Host)}, nil)
	lib := pkgByName(t, resolve(t, newResolver(t, kclmod.Options{}), app, kclmod.Credentials{}), "lib")
	if lib.Version != "1.0.0-rc.10" || readFile(t, filepath.Join(lib.Path, "lib.k")) != "v = \"1.0.0-rc.10\"\n" {
		t.Fatalf("latest: %+v", lib)
	}
}

// go-containerregistry checks a layer's digest when its stream ends, and a tar ends before its
// stream does: a layer whose bytes are not the ones its digest names must fail the dependency
// and leave nothing in the cache, whether the tar inside is whole or not.
func TestLayerNotMatchingItsDigestIsRefused(t *testing.T) {
	for name, tamper := range map[string]func([]byte) []byte{
		"bytes after the tar": func(b []byte) []byte { return append(b, []byte("appended by the registry")...) },
		"another package": func([]byte) []byte {
			return kclmodtest.Tar(map[string]string{"kcl.mod": "[package]\nname = \"lib\"\nversion = \"1.0.0\"\n", "lib.k": "v = \"forged\"\n"})
		},
		"truncated": func(b []byte) []byte { return b[:len(b)/2] },
	} {
		t.Run(name, func(t *testing.T) {
			reg := kclmodtest.StartRegistry(t, "", "")
			push(t, reg, "team/lib:1.0.0", kclmodtest.WritePackage(t, t.TempDir(), "lib", "1.0.0", nil, map[string]string{"lib.k": "v = 1\n"}), kclmodtest.PushOptions{})
			reg.TamperBlob = tamper
			app := kclmodtest.WritePackage(t, t.TempDir(), "app", "0.1.0", []string{fmt.Sprintf(`lib = { oci = "oci://%s/team/lib", tag = "1.0.0" }`, reg.Host)}, nil)
			cache := t.TempDir()
			r := newResolver(t, kclmod.Options{CacheDir: cache})
			_, err := r.Resolve(ctx(t), app, app, kclmod.Credentials{})
			if err == nil {
				t.Fatal("a layer that does not match its digest was accepted")
			}
			t.Logf("error: %v", err)
			var kept []string
			_ = filepath.WalkDir(cache, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() && strings.HasSuffix(p, ".k") {
					kept = append(kept, p)
				}
				return nil
			})
			if len(kept) > 0 {
				t.Fatalf("the cache kept files of the refused layer: %v", kept)
			}
		})
	}
}
