package kclmod_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

// gitSecret reads Secret data as the controller does, failing the test when it is refused.
func gitSecret(t *testing.T, kv ...string) kclmod.GitAuth {
	t.Helper()
	data := map[string][]byte{}
	for i := 0; i+1 < len(kv); i += 2 {
		data[kv[i]] = []byte(kv[i+1])
	}
	a, ok := kclmod.GitAuthFromSecretData(data)
	if !ok {
		t.Fatalf("Secret with keys %q refused", kv)
	}
	return a
}

func gitCreds(hostAuth ...any) kclmod.Credentials {
	c := kclmod.Credentials{Git: map[string]kclmod.GitAuth{}}
	for i := 0; i+1 < len(hostAuth); i += 2 {
		c.Git[hostAuth[i].(string)] = hostAuth[i+1].(kclmod.GitAuth)
	}
	return c
}

// A Git server over https whose certificate only its own CA vouches for, as in-house servers
// have: without the CA (or with it given for another host or port) nothing is fetched; with a
// Flux GitRepository Secret's ca.crt, or source-controller's older caFile, the clone works,
// with or without credentials in the same Secret.
func TestGitCABundleFromSecret(t *testing.T) {
	gs := kclmodtest.StartTLSGitServer(t)
	gs.CreateRepo("lib", kclmodtest.WritePackage(t, t.TempDir(), "lib", "0.1.0", nil, map[string]string{"lib.k": "x = 1\n"}))
	gs.Tag("lib", "v1")
	if !strings.HasPrefix(gs.URL("lib"), "https://") {
		t.Fatalf("not a TLS server: %s", gs.URL("lib"))
	}
	ca := string(gs.CACert())
	app := gitApp(t, gs.URL("lib"))
	r := newResolver(t, kclmod.Options{})

	for _, c := range []kclmod.Credentials{
		{},
		gitCreds("127.0.0.1:1", gitSecret(t, "ca.crt", ca)),
		gitCreds("127.0.0.1", gitSecret(t, "ca.crt", ca)), // port 443
		gitCreds("localhost:"+port(t, gs.Server), gitSecret(t, "ca.crt", ca)),
	} {
		_, err := r.Resolve(ctx(t), app, app, c)
		mustContain(t, err, `dependency "lib"`, "certificate signed by unknown authority")
	}
	if gs.Fetches() != 0 {
		t.Fatal("fetched from a server whose certificate was not verified")
	}

	res := resolve(t, r, app, gitCreds(gs.Host(), gitSecret(t, "ca.crt", ca)))
	if p := pkgByName(t, res, "lib"); p.Source != kclmod.SourceGit || p.Cached || gs.Fetches() == 0 {
		t.Fatalf("want a clone over TLS: %+v, %d fetches", p, gs.Fetches())
	}

	gs.Token = "tok-ca-secret"
	_, err := r.Resolve(ctx(t), app, app, gitCreds(gs.Host(), gitSecret(t, "caFile", ca)))
	mustContain(t, err, `dependency "lib"`, "authentication required and no credentials were given")
	r = newResolver(t, kclmod.Options{}) // an empty cache: the clone itself must go through
	res = resolve(t, r, app, gitCreds(gs.Host(), gitSecret(t, "caFile", ca, "bearerToken", gs.Token)))
	if p := pkgByName(t, res, "lib"); p.Cached || gs.AuthorizationHeaders() == 0 {
		t.Fatalf("want a clone with the token: %+v", p)
	}

	gs.Token, gs.Username, gs.Password = "", "git-user", "git-pass-secret"
	_, err = r.Resolve(ctx(t), app, app, gitCreds(gs.Host(), gitSecret(t, "ca.crt", ca, "username", "git-user", "password", "wrong-pass")))
	mustContain(t, err, "refused the credentials given for "+gs.Host())
	mustNotContain(t, err, "wrong-pass", ca)
	resolve(t, r, app, gitCreds(gs.Host(), gitSecret(t, "ca.crt", ca, "username", "git-user", "password", "git-pass-secret")))
}

// A CA is trusted for its own host only, even when that host redirects elsewhere: here both
// servers have the same certificate, and only the redirect target's own CA lets it through.
func TestGitCABundleOnlyForItsHost(t *testing.T) {
	gs := kclmodtest.StartTLSGitServer(t)
	gs.CreateRepo("lib", kclmodtest.WritePackage(t, t.TempDir(), "lib", "0.1.0", nil, nil))
	gs.Tag("lib", "v1")
	front := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, gs.Server.URL+r.URL.RequestURI(), http.StatusFound)
	}))
	t.Cleanup(front.Close)
	frontHost := strings.TrimPrefix(front.URL, "https://")
	ca := gitSecret(t, "ca.crt", string(gs.CACert()))
	app := gitApp(t, front.URL+"/lib.git")
	r := newResolver(t, kclmod.Options{})

	_, err := r.Resolve(ctx(t), app, app, gitCreds(frontHost, ca))
	mustContain(t, err, `dependency "lib"`, "certificate signed by unknown authority")
	if gs.Conns() == 0 {
		t.Fatal("the redirect was not followed: the front's certificate was refused")
	}
	res := resolve(t, r, app, gitCreds(frontHost, ca, gs.Host(), ca))
	if p := pkgByName(t, res, "lib"); p.Source != kclmod.SourceGit {
		t.Fatalf("%+v", p)
	}
}

// A ca.crt without a certificate in it is an error naming the credentials' host, not a silent
// fallback to the system roots.
func TestGitCABundleInvalid(t *testing.T) {
	gs := kclmodtest.StartTLSGitServer(t)
	app := gitApp(t, gs.URL("lib"))
	_, err := newResolver(t, kclmod.Options{}).Resolve(ctx(t), app, app,
		gitCreds(gs.Host(), gitSecret(t, "ca.crt", "not a certificate")))
	mustContain(t, err, `dependency "lib"`, "the Git credentials for "+gs.Host(), "no PEM certificate")
}
