package kclmod

import (
	"bytes"
	"context"
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
	"github.com/google/go-containerregistry/pkg/authn/kubernetes"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
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

// keychain is an authn.Keychain over one docker config, matching its entries as the kubelet
// matches image pull secrets (go-containerregistry's pkg/authn/kubernetes, as source-controller's
// OCIRepository): the longest path prefix on the registry's host wins, `*.example.com` globs
// match, and a key's scheme and /v1/ or /v2/ do not matter. It runs no credential helper.
type keychain struct {
	ring  authn.Keychain
	hosts map[string]bool // the registries some entry names
}

// parseDockerConfig reads a docker config: {"auths": {host: entry}}, or the legacy .dockercfg
// form where the hosts are at the top level. Entries are decoded by go-containerregistry's
// authn.AuthConfig (the kubelet's reading of `auth`: base64 of user:password, padded or not);
// nothing else of the file is used, credsStore and credHelpers least of all: they would run
// programs. Errors never quote the file, which is a secret.
func parseDockerConfig(b []byte) (*keychain, error) {
	auths := map[string]authn.AuthConfig{}
	k := &keychain{hosts: map[string]bool{}}
	if len(b) > 0 {
		entries, err := dockerConfigEntries(b)
		if err != nil {
			return nil, err
		}
		// sorted, and the first key of a registry kept: two keys naming one registry must not
		// leave the choice to Go's map order
		for _, key := range slices.Sorted(maps.Keys(entries)) {
			raw := entries[key]
			if !isJSONObject(raw) {
				continue // not an auth entry (e.g. credsStore in a legacy file)
			}
			var cfg authn.AuthConfig
			if err := json.Unmarshal(raw, &cfg); err != nil {
				why := "auth is not base64 of user:password"
				if _, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
					why = "a field is not a string"
				}
				return nil, fmt.Errorf("the registry credentials for %s are invalid: %s", registryKey(key), why)
			}
			key = registryKey(key)
			if _, dup := auths[key]; dup {
				continue
			}
			auths[key] = cfg
			host, _, _ := strings.Cut(key, "/")
			k.hosts[host] = true
		}
	}
	data, err := json.Marshal(map[string]any{"auths": auths})
	if err != nil {
		return nil, err
	}
	k.ring, err = kubernetes.NewFromPullSecrets(context.Background(), []corev1.Secret{{
		Type: corev1.SecretTypeDockerConfigJson, Data: map[string][]byte{corev1.DockerConfigJsonKey: data}}})
	if err != nil {
		return nil, errors.New("the registry credentials are not a valid docker config JSON: invalid registry key")
	}
	return k, nil
}

// dockerConfigEntries are the auth entries of a docker config, by key.
func dockerConfigEntries(b []byte) (map[string]json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, errors.New("the registry credentials are not a valid docker config JSON")
	}
	a, ok := top["auths"]
	if !ok {
		return top, nil
	}
	var entries map[string]json.RawMessage
	if err := json.Unmarshal(a, &entries); err != nil {
		return nil, errors.New("the registry credentials are not a valid docker config JSON: invalid auths")
	}
	return entries, nil
}

func isJSONObject(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) > 0 && b[0] == '{'
}

// registryKey is a docker config key without its scheme, its host in lower case and Docker Hub
// under the one name go-containerregistry gives it ("https://index.docker.io/v1/", "docker.io"
// and "registry-1.docker.io" are one registry).
func registryKey(key string) string {
	key = strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	host, path, _ := strings.Cut(key, "/")
	host = dockerHub(strings.ToLower(host))
	// Docker's /v1/ and /v2/ mean the registry itself, as in the kubelet's matching
	if path = strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(path, "v1/"), "v2/"), "/"); path != "" {
		return host + "/" + path
	}
	return host
}

func dockerHub(host string) string {
	switch host {
	case "index.docker.io", "registry-1.docker.io", "docker.io":
		return name.DefaultRegistry
	}
	return host
}

// has tells whether an entry names the registry (whatever its paths).
func (k *keychain) has(registry string) bool {
	return k.hosts[dockerHub(strings.ToLower(registry))]
}

// Resolve implements authn.Keychain.
func (k *keychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	return k.ring.Resolve(onDockerHub{r})
}

// onDockerHub names Docker Hub's aliases as the keys do.
type onDockerHub struct{ authn.Resource }

func (r onDockerHub) RegistryStr() string { return dockerHub(r.Resource.RegistryStr()) }

func (r onDockerHub) String() string {
	reg := r.Resource.RegistryStr()
	if d := dockerHub(reg); d != reg {
		return d + strings.TrimPrefix(r.Resource.String(), reg)
	}
	return r.Resource.String()
}
