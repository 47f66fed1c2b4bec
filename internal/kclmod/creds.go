package kclmod

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

// Credentials are the secrets one Resolve call may use; nothing is taken from the environment or
// from the user's configuration files. They are never written to logs or error messages.
type Credentials struct {
	// DockerConfigJSON is a docker config file (the `.dockerconfigjson` key of a
	// kubernetes.io/dockerconfigjson Secret): {"auths": {"host[:port]": {"auth": "...",
	// "username": "...", "password": "...", "identitytoken": "...", "registrytoken": "..."}}}.
	// The legacy .dockercfg form (the auths map at the top level) is accepted too.
	DockerConfigJSON []byte
	// Git holds credentials for Git over HTTP(S) by host ("github.com", "git.local:8443"). They
	// are sent only over https, and only to that exact host and port: a host without a port
	// means port 443. Credentials marked Insecure are also sent over plain http, to the same
	// host and port (a host without a port then means port 80 for http URLs).
	Git map[string]GitAuth
}

// GitAuth is a username and password (basic auth), or a bearer token.
type GitAuth struct {
	Username    string
	Password    string
	BearerToken string
	// Insecure lets the credentials be sent over plain http, readable by anyone on the path.
	Insecure bool
}

// GitAuthFromSecretData reads Flux's Git secret keys: username and password, or bearerToken,
// and insecure: "true" to allow plain http.
func GitAuthFromSecretData(data map[string][]byte) (GitAuth, bool) {
	insecure, _ := strconv.ParseBool(strings.TrimSpace(string(data["insecure"])))
	a := GitAuth{Username: string(data["username"]), Password: string(data["password"]),
		BearerToken: string(data["bearerToken"]), Insecure: insecure}
	return a, a.BearerToken != "" || a.Username != "" || a.Password != ""
}

// DockerConfigFromSecretData returns the docker config of a kubernetes.io/dockerconfigjson
// Secret (`.dockerconfigjson`), or of a kubernetes.io/dockercfg one (`.dockercfg`).
func DockerConfigFromSecretData(data map[string][]byte) ([]byte, bool) {
	for _, k := range []string{".dockerconfigjson", ".dockercfg", "config.json"} {
		if b, ok := data[k]; ok && len(b) > 0 {
			return b, true
		}
	}
	return nil, false
}

func (g GitAuth) method() transport.AuthMethod {
	if g.BearerToken != "" {
		return &githttp.TokenAuth{Token: g.BearerToken}
	}
	if g.Username != "" || g.Password != "" {
		user := g.Username
		if user == "" {
			user = "git"
		}
		return &githttp.BasicAuth{Username: user, Password: g.Password}
	}
	return nil
}

// gitAuthFor returns the credentials to send to u, if any (see Credentials.Git).
func (c Credentials) gitAuthFor(u *url.URL) (transport.AuthMethod, bool) {
	a, ok := c.gitAuthForHost(u)
	if !ok || (u.Scheme != "https" && !(u.Scheme == "http" && a.Insecure)) {
		return nil, false
	}
	return a.method(), true
}

// gitAuthWithheld reports credentials for u's host and port that plain http may not carry.
func (c Credentials) gitAuthWithheld(u *url.URL) bool {
	a, ok := c.gitAuthForHost(u)
	return ok && u.Scheme == "http" && !a.Insecure
}

// gitAuthForHost finds the credentials whose host and port are u's, ports defaulting to the
// scheme's (a credential's host without a port is not a wildcard).
func (c Credentials) gitAuthForHost(u *url.URL) (GitAuth, bool) {
	want := hostPort(u)
	for _, host := range slices.Sorted(maps.Keys(c.Git)) {
		a := c.Git[host]
		h, err := url.Parse(u.Scheme + "://" + host)
		if err != nil || h.Host != host {
			continue // not a bare host[:port]
		}
		if hostPort(h) == want {
			return a, true
		}
	}
	return GitAuth{}, false
}

type dockerAuthEntry struct {
	Auth          string `json:"auth"`
	Username      string `json:"username"`
	Password      string `json:"password"`
	IdentityToken string `json:"identitytoken"`
	RegistryToken string `json:"registrytoken"`
}

// keychain is an authn.Keychain over one docker config.
type keychain struct {
	auths map[string]authn.AuthConfig
}

func parseDockerConfig(b []byte) (*keychain, error) {
	k := &keychain{auths: map[string]authn.AuthConfig{}}
	if len(b) == 0 {
		return k, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, errors.New("the registry credentials are not a valid docker config JSON")
	}
	raw := top
	if a, ok := top["auths"]; ok {
		raw = nil
		if err := json.Unmarshal(a, &raw); err != nil {
			return nil, errors.New("the registry credentials are not a valid docker config JSON: invalid auths")
		}
	}
	for host, msg := range raw {
		var e dockerAuthEntry
		if err := json.Unmarshal(msg, &e); err != nil {
			continue // not an auth entry (e.g. credsStore in a legacy file)
		}
		cfg := authn.AuthConfig{Username: e.Username, Password: e.Password, IdentityToken: e.IdentityToken, RegistryToken: e.RegistryToken}
		if e.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(e.Auth)
			if err != nil {
				return nil, fmt.Errorf("the registry credentials for %s are invalid: auth is not base64", normalizeRegistryHost(host))
			}
			user, pass, ok := strings.Cut(string(dec), ":")
			if !ok {
				return nil, fmt.Errorf("the registry credentials for %s are invalid: auth is not user:password", normalizeRegistryHost(host))
			}
			cfg.Username, cfg.Password = user, pass
		}
		k.auths[normalizeRegistryHost(host)] = cfg
	}
	return k, nil
}

// normalizeRegistryHost turns a docker config key ("https://index.docker.io/v1/", "host:5000")
// into a registry host.
func normalizeRegistryHost(h string) string {
	h = strings.TrimPrefix(strings.TrimPrefix(h, "https://"), "http://")
	if i := strings.Index(h, "/"); i >= 0 {
		h = h[:i]
	}
	h = strings.ToLower(h)
	switch h {
	case "index.docker.io", "registry-1.docker.io", "docker.io":
		return "index.docker.io"
	}
	return h
}

func (k *keychain) has(host string) bool {
	_, ok := k.auths[normalizeRegistryHost(host)]
	return ok
}

// Resolve implements authn.Keychain.
func (k *keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if cfg, ok := k.auths[normalizeRegistryHost(r.RegistryStr())]; ok {
		return authn.FromConfig(cfg), nil
	}
	return authn.Anonymous, nil
}
