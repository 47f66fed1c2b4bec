package kclmod_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
)

// HTTP goes through the guard: a server on 127.0.0.1 is refused by default, before any
// connection, with the rule and without the transport's words; with 127.0.0.0/8 allowed it is
// reached, and an error answer's body reaches the caller. The host allow-list applies too, and
// HTTP_PROXY is not read.
func TestHTTPGuard(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			http.Error(w, `{"status":"error","error":"parse error"}`, http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1") // never used: the proxy is only Options.Proxy
	host := strings.TrimPrefix(srv.URL, "http://")

	get := func(h *kclmod.HTTP, path string) (string, int, error) {
		resp, err := h.Client().Get(srv.URL + path)
		if err != nil {
			return "", 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), resp.StatusCode, err
	}

	strict, err := kclmod.NewHTTP(kclmod.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = get(strict, "/")
	if !errors.Is(err, kclmod.ErrHostNotAllowed) || !strings.Contains(err.Error(), "host not allowed: "+host) ||
		!strings.Contains(err.Error(), "loopback") {
		t.Fatalf("default options: %v; want the loopback address refused", err)
	}
	for _, leak := range []string{"dial", "connection refused", "proxy"} {
		if strings.Contains(err.Error(), leak) {
			t.Errorf("the refusal %q tells how the connection went (%q)", err, leak)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("the server accepted %d connections under the default rules", n)
	}

	h, err := kclmod.NewHTTP(kclmod.Options{AllowedNetworks: loopback})
	if err != nil {
		t.Fatal(err)
	}
	if body, code, err := get(h, "/"); err != nil || code != 200 || body != "ok" {
		t.Fatalf("with 127.0.0.0/8 allowed: %q %d %v", body, code, err)
	}
	if body, code, err := get(h, "/bad"); err != nil || code != 400 || !strings.Contains(body, "parse error") {
		t.Fatalf("an error answer: %q %d %v; want its body kept", body, code, err)
	}

	other, err := kclmod.NewHTTP(kclmod.Options{AllowedNetworks: loopback, AllowedHosts: []string{"prometheus.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := get(other, "/"); !errors.Is(err, kclmod.ErrHostNotAllowed) || !strings.Contains(err.Error(), "not one of the allowed hosts") {
		t.Fatalf("a host outside AllowedHosts: %v", err)
	}
}

// A redirect is a request of its own through the guard: one to a refused address is refused,
// and a redirect to another port drops the Authorization header.
func TestHTTPRedirects(t *testing.T) {
	var gotAuth atomic.Value
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth.Store(r.Header.Get("Authorization"))
	}))
	t.Cleanup(target.Close)
	redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/meta" {
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
			return
		}
		http.Redirect(w, r, target.URL+"/", http.StatusFound)
	}))
	t.Cleanup(redir.Close)
	h, err := kclmod.NewHTTP(kclmod.Options{AllowedNetworks: loopback})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Client().Get(redir.URL + "/meta"); !errors.Is(err, kclmod.ErrHostNotAllowed) || !strings.Contains(err.Error(), "169.254.169.254") {
		t.Fatalf("a redirect to the metadata address: %v", err)
	}
	req, _ := http.NewRequest(http.MethodGet, redir.URL+"/", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := h.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if a, _ := gotAuth.Load().(string); a != "" {
		t.Fatalf("the redirect to another port carried Authorization %q", a)
	}
}
