package kclmod

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// authConfig is what the keychain gives for a registry or repository.
func authConfig(t *testing.T, k *keychain, r authn.Resource) authn.AuthConfig {
	t.Helper()
	a, err := k.Resolve(r)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Authorization()
	if err != nil {
		t.Fatal(err)
	}
	return *c
}

// The docker config forms Secrets hold: kubernetes.io/dockerconfigjson ({"auths": ...}) and
// kubernetes.io/dockercfg (the hosts at the top level), with hosts written with or without a
// scheme and path, and Docker Hub under any of its names.
func TestParseDockerConfig(t *testing.T) {
	for _, tc := range []struct {
		name, config, registry string
		want                   authn.AuthConfig
	}{
		{"auth", `{"auths": {"reg.example:5000": {"auth": "` + b64("u:p:w") + `"}}}`, "reg.example:5000",
			authn.AuthConfig{Username: "u", Password: "p:w"}},
		{"unpadded auth", `{"auths": {"reg.example": {"auth": "` + strings.TrimRight(b64("ab:c"), "=") + `"}}}`, "reg.example",
			authn.AuthConfig{Username: "ab", Password: "c"}},
		{"username and password", `{"auths": {"reg.example": {"username": "u", "password": "p"}}}`, "reg.example",
			authn.AuthConfig{Username: "u", Password: "p"}},
		{"tokens", `{"auths": {"reg.example": {"identitytoken": "id", "registrytoken": "rt"}}}`, "reg.example",
			authn.AuthConfig{IdentityToken: "id", RegistryToken: "rt"}},
		{"scheme and path", `{"auths": {"https://Reg.Example/v2/": {"username": "u", "password": "p"}}}`, "reg.example",
			authn.AuthConfig{Username: "u", Password: "p"}},
		{"docker hub key", `{"auths": {"https://index.docker.io/v1/": {"username": "u", "password": "p"}}}`, "docker.io",
			authn.AuthConfig{Username: "u", Password: "p"}},
		{"docker hub alias", `{"auths": {"docker.io": {"username": "u", "password": "p"}}}`, "registry-1.docker.io",
			authn.AuthConfig{Username: "u", Password: "p"}},
		{"legacy dockercfg", `{"http://reg.example": {"auth": "` + b64("u:p") + `", "email": "e@x"}, "credsStore": "desktop"}`, "reg.example",
			authn.AuthConfig{Username: "u", Password: "p"}},
		{"credential helpers ignored", `{"auths": {"reg.example": {"username": "u", "password": "p"}}, "credsStore": "evil", "credHelpers": {"other.example": "evil"}}`, "other.example",
			authn.AuthConfig{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := parseDockerConfig([]byte(tc.config))
			if err != nil {
				t.Fatal(err)
			}
			reg, err := name.NewRegistry(tc.registry)
			if err != nil {
				t.Fatal(err)
			}
			got := authConfig(t, k, reg)
			got.Auth = "" // the encoding of Username and Password, when both are set
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if k.has(tc.registry) != (tc.want != authn.AuthConfig{}) {
				t.Fatalf("has(%s) = %v", tc.registry, k.has(tc.registry))
			}
		})
	}
}

// Invalid configs are errors that never quote the config: it is a secret.
func TestParseDockerConfigErrors(t *testing.T) {
	for config, want := range map[string]string{
		`{"auths": {"reg.example": {"auth": "###pw-secret"}}}`:           "registry credentials for reg.example are invalid: auth is not base64",
		`{"auths": {"reg.example": {"auth": "` + b64("nocolon") + `"}}}`: "registry credentials for reg.example are invalid: auth is not base64",
		`{"auths": {"reg.example": {"password": 12345}}}`:                "registry credentials for reg.example are invalid: a field is not a string",
		`{"auths": ["pw-secret"]}`:                                       "not a valid docker config JSON: invalid auths",
		`pw-secret`:                                                      "not a valid docker config JSON",
	} {
		_, err := parseDockerConfig([]byte(config))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", config, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "12345")) {
			t.Errorf("%s: error %q quotes the config", config, err)
		}
	}
}

// The three keys a registry Secret may hold the config under.
func TestDockerConfigFromSecretData(t *testing.T) {
	for _, key := range []string{".dockerconfigjson", ".dockercfg", "config.json"} {
		if b, ok := DockerConfigFromSecretData(map[string][]byte{key: []byte("{}")}); !ok || string(b) != "{}" {
			t.Errorf("%s: %q %v", key, b, ok)
		}
	}
	if _, ok := DockerConfigFromSecretData(map[string][]byte{"password": []byte("x")}); ok {
		t.Error("a Secret without a docker config accepted")
	}
}

// The keys of Flux GitRepository Secrets for HTTPS.
func TestGitAuthFromSecretData(t *testing.T) {
	for _, tc := range []struct {
		name string
		data map[string]string
		want GitAuth
		ok   bool
	}{
		{"basic", map[string]string{"username": "u", "password": "p"}, GitAuth{Username: "u", Password: "p"}, true},
		{"username only", map[string]string{"username": "u"}, GitAuth{Username: "u"}, true},
		{"password only: user git", map[string]string{"password": "p"}, GitAuth{Username: "git", Password: "p"}, true},
		{"bearer token wins", map[string]string{"bearerToken": "t", "username": "u", "password": "p"}, GitAuth{BearerToken: "t"}, true},
		{"ca.crt", map[string]string{"ca.crt": "CA"}, GitAuth{CABundle: []byte("CA")}, true},
		{"caFile", map[string]string{"caFile": "CA", "bearerToken": "t"}, GitAuth{BearerToken: "t", CABundle: []byte("CA")}, true},
		{"ca.crt over caFile", map[string]string{"ca.crt": "new", "caFile": "old"}, GitAuth{CABundle: []byte("new")}, true},
		{"insecure", map[string]string{"username": "u", "password": "p", "insecure": " true\n"}, GitAuth{Username: "u", Password: "p", Insecure: true}, true},
		{"nothing", map[string]string{"known_hosts": "x"}, GitAuth{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := map[string][]byte{}
			for k, v := range tc.data {
				data[k] = []byte(v)
			}
			a, ok := GitAuthFromSecretData(data)
			if ok != tc.ok || a.Username != tc.want.Username || a.Password != tc.want.Password ||
				a.BearerToken != tc.want.BearerToken || string(a.CABundle) != string(tc.want.CABundle) || a.Insecure != tc.want.Insecure {
				t.Fatalf("got %+v %v, want %+v %v", a, ok, tc.want, tc.ok)
			}
		})
	}
}

// CA bundles apply over https to their exact host and port, the first spelling of one winning
// as for the credentials.
func TestGitCAs(t *testing.T) {
	creds := Credentials{Git: map[string]GitAuth{
		"git.example":         {CABundle: []byte("a")},
		"git.example:443":     {CABundle: []byte("b")},
		"other.example":       {BearerToken: "t"},
		"other.example:443":   {CABundle: []byte("c")},
		"git.example:8443":    {CABundle: []byte("d")},
		"https://bad.example": {CABundle: []byte("e")},
	}}
	var got []string
	for _, c := range creds.gitCAs() {
		got = append(got, c.host+"="+c.hostPort+"="+string(c.pem))
	}
	want := "git.example=git.example:443=a git.example:8443=git.example:8443=d"
	if strings.Join(got, " ") != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// Entries are matched as the kubelet matches image pull secrets: the longest path prefix on the
// host wins, globs match subdomains, and a key's scheme and /v1/ do not matter.
func TestDockerConfigMatchesLikeTheKubelet(t *testing.T) {
	config := `{"auths": {
		"ghcr.io/team-a": {"username": "a", "password": "pa"},
		"ghcr.io/team-b": {"username": "b", "password": "pb"},
		"*.azurecr.io": {"username": "az", "password": "paz"},
		"https://registry.example:5000/v1/": {"username": "ex", "password": "pex"}
	}}`
	user := func(k *keychain, repo string) string {
		r, err := name.NewRepository(repo)
		if err != nil {
			t.Fatal(err)
		}
		return authConfig(t, k, r).Username
	}
	// map order decided the winner before: many parses, each must give the same answers
	for range 50 {
		k, err := parseDockerConfig([]byte(config))
		if err != nil {
			t.Fatal(err)
		}
		for repo, want := range map[string]string{
			"ghcr.io/team-a/pkg": "a", "ghcr.io/team-b/pkg": "b", "ghcr.io/team-c/pkg": "",
			"myreg.azurecr.io/kcl/k8s": "az", "registry.example:5000/kcl/k8s": "ex",
		} {
			if got := user(k, repo); got != want {
				t.Fatalf("%s: user %q, want %q", repo, got, want)
			}
		}
		if !k.has("ghcr.io") || !k.has("registry.example:5000") || k.has("quay.io") {
			t.Fatal("has: the registries named by the config")
		}
	}
}

// Two keys for one registry ("docker.io" and Docker's own "https://index.docker.io/v1/") give
// the same credentials at every parse, whatever Go's map order: the first key in sorted order.
func TestDuplicateRegistryKeysAreDeterministic(t *testing.T) {
	config := `{"auths": {
		"https://index.docker.io/v1/": {"username": "b", "password": "pb"},
		"docker.io": {"username": "a", "password": "pa"}
	}}`
	for range 50 {
		k, err := parseDockerConfig([]byte(config))
		if err != nil {
			t.Fatal(err)
		}
		r, err := name.NewRepository("docker.io/library/lib")
		if err != nil {
			t.Fatal(err)
		}
		if u := authConfig(t, k, r).Username; u != "a" {
			t.Fatalf("user %q, want a (the first key in sorted order)", u)
		}
	}
}
