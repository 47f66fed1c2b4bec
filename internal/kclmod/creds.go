package kclmod

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	fluxgit "github.com/fluxcd/pkg/git"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/google/go-containerregistry/pkg/authn"
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

// GitAuth is a username and password (basic auth), or a bearer token, and the CA to verify the
// host's TLS certificate with.
type GitAuth struct {
	Username    string
	Password    string
	BearerToken string
	// CABundle holds PEM certificates trusted for the host's https, in addition to the roots
	// of Options.Transport (by default the system's): for requests to this exact host and port
	// only, whichever dependency they are for. It is not a secret.
	CABundle []byte
	// Insecure lets the credentials be sent over plain http, readable by anyone on the path.
	Insecure bool
}

// GitAuthFromSecretData reads the keys of a Flux GitRepository Secret for HTTPS, as
// source-controller does (fluxcd/pkg/git's NewAuthOptions): username and password, or
// bearerToken, and ca.crt (or the older caFile) for a CA bundle; plus insecure: "true" to allow
// plain http. ok is false when the Secret holds none of the credentials or CA keys. tls.crt and
// tls.key (client certificates) are not supported.
func GitAuthFromSecretData(data map[string][]byte) (a GitAuth, ok bool) {
	// NewAuthOptions refuses a password without a username, as Flux does, while this package has
	// always sent it as user "git": NewAuthOptions takes the username from the URL when the
	// Secret has none.
	u := url.URL{Scheme: string(fluxgit.HTTPS)}
	if len(data["username"]) == 0 && len(data["password"]) > 0 {
		u.User = url.User("git")
	}
	o, err := fluxgit.NewAuthOptions(u, data)
	if err != nil {
		return GitAuth{}, false
	}
	insecure, _ := strconv.ParseBool(strings.TrimSpace(string(data["insecure"])))
	a = GitAuth{Username: o.Username, Password: o.Password, BearerToken: o.BearerToken, CABundle: o.CAFile, Insecure: insecure}
	return a, a.method() != nil || len(a.CABundle) > 0
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
	m := a.method()
	return m, m != nil
}

// gitAuthWithheld reports credentials for u's host and port that plain http may not carry.
func (c Credentials) gitAuthWithheld(u *url.URL) bool {
	a, ok := c.gitAuthForHost(u)
	return ok && u.Scheme == "http" && !a.Insecure && a.method() != nil
}

// hostCA is the CA bundle of the Git credentials for host (as written) at hostPort.
type hostCA struct {
	host, hostPort string
	pem            []byte
}

// gitCAs lists the CA bundles of the Git credentials, by host name order (the first of two
// spellings of one host and port wins, as in gitAuthForHost).
func (c Credentials) gitCAs() []hostCA {
	var out []hostCA
	seen := map[string]bool{}
	for _, host := range slices.Sorted(maps.Keys(c.Git)) {
		h, err := url.Parse("https://" + host)
		if err != nil || h.Host != host || seen[hostPort(h)] {
			continue
		}
		seen[hostPort(h)] = true
		if a := c.Git[host]; len(a.CABundle) > 0 {
			out = append(out, hostCA{host: host, hostPort: hostPort(h), pem: a.CABundle})
		}
	}
	return out
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

// keychain is an authn.Keychain over one docker config.
type keychain struct {
	auths map[string]authn.AuthConfig
}

// parseDockerConfig reads a docker config: {"auths": {host: entry}}, or the legacy .dockercfg
// form where the hosts are at the top level. Entries are decoded by go-containerregistry's
// authn.AuthConfig (the kubelet's reading of `auth`: base64 of user:password, padded or not);
// nothing else of the file is used, credsStore and credHelpers least of all: they would run
// programs. Errors never quote the file, which is a secret.
func parseDockerConfig(b []byte) (*keychain, error) {
	k := &keychain{auths: map[string]authn.AuthConfig{}}
	if len(b) == 0 {
		return k, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, errors.New("the registry credentials are not a valid docker config JSON")
	}
	entries := top
	if a, ok := top["auths"]; ok {
		entries = nil
		if err := json.Unmarshal(a, &entries); err != nil {
			return nil, errors.New("the registry credentials are not a valid docker config JSON: invalid auths")
		}
	}
	for host, raw := range entries {
		if !isJSONObject(raw) {
			continue // not an auth entry (e.g. credsStore in a legacy file)
		}
		var cfg authn.AuthConfig
		if err := json.Unmarshal(raw, &cfg); err != nil {
			why := "auth is not base64 of user:password"
			if _, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
				why = "a field is not a string"
			}
			return nil, fmt.Errorf("the registry credentials for %s are invalid: %s", normalizeRegistryHost(host), why)
		}
		k.auths[normalizeRegistryHost(host)] = cfg
	}
	return k, nil
}

func isJSONObject(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) > 0 && b[0] == '{'
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
