package server

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/artifact/config"

	"github.com/kcl-flux/kcl-artifact-controller/internal/artifactstore"
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod/kclmodtest"
)

func setup(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "storage")
	dir := objectDir(t, root)
	archive := filepath.Join(dir, "abc.tar.gz")
	os.WriteFile(archive, kclmodtest.TarGz(map[string]string{"manifests.yaml": "kind: ConfigMap\n", "README.md": "x"}), 0o644)
	os.Symlink(archive, filepath.Join(dir, "latest.tar.gz"))
	os.WriteFile(filepath.Join(base, "secret.txt"), []byte("outside"), 0o644)
	os.Symlink(filepath.Join(base, "secret.txt"), filepath.Join(dir, "escape.txt"))
	srv := httptest.NewServer(storeHandler(t, root, Options{}))
	t.Cleanup(srv.Close)
	return srv, archive
}

// objectDir is the artifact directory of the KCLArtifact ns/app under root, where the tests
// write archives by hand.
func objectDir(t *testing.T, root string) string {
	t.Helper()
	dir := filepath.Join(root, "kclartifact", "ns", "app")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// storeHandler opens the artifact store on root, which records the archives written there by
// hand as found (as it does an earlier release's storage), and serves it to requests that carry
// their object's token, as the URLs the controller publishes do.
func storeHandler(t *testing.T, root string, o Options) http.Handler {
	t.Helper()
	s, err := artifactstore.New(&config.Options{StoragePath: root, StorageAddress: "127.0.0.1:0", StorageAdvAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := HandlerWithOptions(s, o)
	if err != nil {
		t.Fatal(err)
	}
	return withTokens(s, h)
}

// withTokens adds its object's token to a request that has none.
func withTokens(s *artifactstore.Store, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m := objectFile.FindStringSubmatch(path.Clean("/" + r.URL.Path)); m != nil && !r.URL.Query().Has(artifactstore.TokenParam) {
			q := r.URL.Query()
			// archives written by hand are recorded as found, as an earlier release's: no UID
			q.Set(artifactstore.TokenParam, s.Token(m[1], m[2], ""))
			r.URL.RawQuery = q.Encode()
		}
		h.ServeHTTP(w, r)
	})
}

func get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func TestServesArtifactsAndLatestLink(t *testing.T) {
	srv, archive := setup(t)
	want, _ := os.ReadFile(archive)
	for _, p := range []string{"/kclartifact/ns/app/abc.tar.gz", "/kclartifact/ns/app/latest.tar.gz"} {
		code, body, _ := get(t, srv.URL+p)
		if code != http.StatusOK || body != string(want) {
			t.Fatalf("%s: %d, %d bytes", p, code, len(body))
		}
	}
}

func TestYAMLView(t *testing.T) {
	srv, _ := setup(t)
	code, body, hdr := get(t, srv.URL+"/kclartifact/ns/app/latest.yaml")
	if code != http.StatusOK || body != "kind: ConfigMap\n" {
		t.Fatalf("%d %q", code, body)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/yaml; charset=utf-8" {
		t.Fatalf("content type %q", ct)
	}
	if code, _, _ := get(t, srv.URL+"/kclartifact/ns/app/missing.yaml"); code != http.StatusNotFound {
		t.Fatalf("YAML view of a missing archive: %d", code)
	}
}

func TestNoListingsNoEscapes(t *testing.T) {
	srv, _ := setup(t)
	for _, p := range []string{
		"/", "/kclartifact/", "/kclartifact/ns/app", // directories
		"/kclartifact/ns/app/escape.txt", // a link out of storage
		"/../secret.txt", "/kclartifact/../../secret.txt", "/%2e%2e/secret.txt",
	} {
		code, body, _ := get(t, srv.URL+p)
		if code != http.StatusNotFound || bytes.Contains([]byte(body), []byte("outside")) {
			t.Errorf("%s: %d %q", p, code, body)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/kclartifact/ns/app/abc.tar.gz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST: %v %v", err, resp.Status)
	}
}

// entry is one tar entry, for archives whose order or entry types matter.
type entry struct {
	name, body string
	typ        byte
	link       string
}

func writeTarGz(t *testing.T, file string, entries []entry) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: typ, Linkname: e.link}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// previousYAML is the YAML view as it was before it streamed: every file read into memory,
// then written in name order. The streaming view must give the same bytes.
func previousYAML(t *testing.T, archive string) string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string][]byte{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ext := path.Ext(hdr.Name)
		if hdr.Typeflag != tar.TypeReg || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = b
	}
	names := slices.Sorted(maps.Keys(files))
	var out strings.Builder
	for i, n := range names {
		if i > 0 && !bytes.HasPrefix(files[n], []byte("---")) {
			out.WriteString("---\n")
		}
		out.Write(files[n])
	}
	return out.String()
}

func TestYAMLViewSameAsBeforeStreaming(t *testing.T) {
	root := t.TempDir()
	cases := map[string][]entry{
		// Walk order of the artifact store: "a/" sorts before "a-b.yaml" in a directory, after
		// it in a full name, so writing in name order takes more than one read.
		"walk": {
			{name: "a/", typ: tar.TypeDir},
			{name: "a/b.yaml", body: "kind: B\n"},
			{name: "a-b.yaml", body: "---\nkind: AB\n"},
			{name: "a.yaml", body: "kind: A"},
			{name: "z.yml", body: "kind: Z\n"},
		},
		"mixed": {
			{name: "z.yaml", body: "kind: Z\n"},
			{name: "README.md", body: "not yaml"},
			{name: "link.yaml", typ: tar.TypeSymlink, link: "z.yaml"},
			{name: "empty.yaml", body: ""},
			{name: "m.yaml", body: "-"},
			{name: "dup.yaml", body: "kind: First\n"},
			{name: "b.yaml", body: "---\n--- \nkind: B\n"},
			{name: "dup.yaml", body: "kind: Last\n"},
			{name: "notes.txt", body: "kind: NotYAML\n"},
		},
		"reverse": reversed(20),
		"none":    {{name: "README.md", body: "x"}},
	}
	for name, entries := range cases {
		writeTarGz(t, filepath.Join(objectDir(t, root), name+".tar.gz"), entries)
	}
	srv := httptest.NewServer(storeHandler(t, root, Options{}))
	defer srv.Close()
	for name := range cases {
		want := previousYAML(t, filepath.Join(objectDir(t, root), name+".tar.gz"))
		code, body, _ := get(t, srv.URL+"/kclartifact/ns/app/"+name+".yaml")
		if code != http.StatusOK || body != want {
			t.Errorf("%s: %d %q, want %q", name, code, body, want)
		}
		resp, err := http.Head(srv.URL + "/kclartifact/ns/app/" + name + ".yaml")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.ContentLength != int64(len(want)) {
			t.Errorf("%s: HEAD %d, length %d, want %d", name, resp.StatusCode, resp.ContentLength, len(want))
		}
	}
}

// reversed is n YAML files stored in reverse name order: n reads of the archive to show.
func reversed(n int) []entry {
	var es []entry
	for i := n - 1; i >= 0; i-- {
		es = append(es, entry{name: fmt.Sprintf("f%03d.yaml", i), body: fmt.Sprintf("n: %d\n", i)})
	}
	return es
}

func TestYAMLViewRefusesArchivesItWouldReadTooOften(t *testing.T) {
	root := t.TempDir()
	// one read more than the 32 that internal/tarball allows (maxYAMLPasses)
	writeTarGz(t, filepath.Join(objectDir(t, root), "a.tar.gz"), reversed(33))
	srv := httptest.NewServer(storeHandler(t, root, Options{}))
	defer srv.Close()
	code, body, _ := get(t, srv.URL+"/kclartifact/ns/app/a.yaml")
	if code != http.StatusInternalServerError || !strings.Contains(body, "out of name order") {
		t.Fatalf("%d %q", code, body)
	}
}

// yamlChunk is highly compressible YAML: tens of MiB of it make an archive of a few hundred KiB.
var yamlChunk = []byte(strings.Repeat("# padding padding padding padding padding padding padding\n", 1024))

// writeYAMLEntry writes a YAML file of size bytes into tw.
func writeYAMLEntry(t *testing.T, tw *tar.Writer, name string, size int64) {
	t.Helper()
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	for left := size; left > 0; {
		n := min(left, int64(len(yamlChunk)))
		if _, err := tw.Write(yamlChunk[:n]); err != nil {
			t.Fatal(err)
		}
		left -= n
	}
}

// bigArchive writes an archive of two YAML files of size bytes each, stored out of name order.
func bigArchive(t *testing.T, file string, size int64) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	tw := tar.NewWriter(gz)
	writeYAMLEntry(t, tw, "b.yaml", size)
	writeYAMLEntry(t, tw, "a.yaml", size)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestYAMLViewRefusesTooMuchYAMLBeforeReadingIt(t *testing.T) {
	root := t.TempDir()
	// Each archive ends right after the header that takes it over the bound: a view that read
	// on (or held the content) would fail on the truncated archive with another message.
	truncated := func(name string, sizes ...int64) {
		f, err := os.Create(filepath.Join(objectDir(t, root), name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		gz := gzip.NewWriter(f)
		tw := tar.NewWriter(gz)
		for _, size := range sizes[:len(sizes)-1] {
			writeYAMLEntry(t, tw, fmt.Sprintf("f%d.yaml", size), size)
		}
		// The header goes out at once; its content never comes.
		if err := tw.WriteHeader(&tar.Header{Name: "last.yaml", Mode: 0o644, Size: sizes[len(sizes)-1], Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if err := gz.Close(); err != nil {
			t.Fatal(err)
		}
	}
	truncated("huge.tar.gz", 1<<40)
	truncated("sum.tar.gz", 40<<20, 30<<20)
	srv := httptest.NewServer(storeHandler(t, root, Options{}))
	defer srv.Close()
	for _, p := range []string{"/kclartifact/ns/app/huge.yaml", "/kclartifact/ns/app/sum.yaml"} {
		code, body, _ := get(t, srv.URL+p)
		if code != http.StatusInternalServerError || !strings.Contains(body, "larger than the 64 MiB") {
			t.Errorf("%s: %d %q", p, code, body)
		}
	}
}

// heap is the live heap after a collection, in MiB.
func heap() (inuse, alloc float64) {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapInuse) / (1 << 20), float64(m.HeapAlloc) / (1 << 20)
}

// stalledClient sends a request for p and reads nothing but the reply's header.
func stalledClient(t *testing.T, addr, p string) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: artifacts\r\n\r\n", p); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 16), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, resp
}

func TestSlowReadersGetBoundedYAMLViewsAndMemory(t *testing.T) {
	const clients, views, mib = 20, DefaultMaxYAMLViews, 1 << 20
	root := t.TempDir()
	bigArchive(t, filepath.Join(objectDir(t, root), "big.tar.gz"), 30*mib)
	writeTarGz(t, filepath.Join(objectDir(t, root), "small.tar.gz"), []entry{{name: "a.yaml", body: "kind: A\n"}})
	srv := httptest.NewServer(storeHandler(t, root, Options{}))
	defer srv.Close()
	beforeInuse, beforeAlloc := heap()
	peak := sampleHeapPeak()

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	codes := map[int]int{}
	for range clients {
		c, resp := stalledClient(t, srv.Listener.Addr().String(), "/kclartifact/ns/app/big.yaml")
		conns = append(conns, c)
		codes[resp.StatusCode]++
		if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
			t.Error("503 without Retry-After")
		}
		if resp.StatusCode == http.StatusOK && resp.ContentLength != 60*mib+int64(len("---\n")) {
			t.Errorf("Content-Length %d", resp.ContentLength)
		}
	}
	if codes[http.StatusOK] != views || codes[http.StatusServiceUnavailable] != clients-views {
		t.Errorf("replies by status: %v, want %d OK and the others 503", codes, views)
	}
	inuse, alloc := heap()
	top := peak()
	t.Logf("heap with %d stalled clients: in use %.1f MiB, allocated %.1f MiB (before them: %.1f, %.1f; highest allocated meanwhile, garbage included: %.1f)",
		clients, inuse, alloc, beforeInuse, beforeAlloc, top)
	if inuse > 100 || alloc > 100 || top > 100 {
		t.Fatalf("heap in use %.1f MiB, allocated %.1f MiB, peak %.1f MiB while clients stall", inuse, alloc, top)
	}
	if code, _, _ := get(t, srv.URL+"/kclartifact/ns/app/small.yaml"); code != http.StatusServiceUnavailable {
		t.Fatalf("a YAML view while every slot is taken: %d", code)
	}
	for _, c := range conns {
		c.Close()
	}
	// Slots come back once the stalled clients are gone.
	waitFor(t, 10*time.Second, func() bool {
		code, _, _ := get(t, srv.URL+"/kclartifact/ns/app/small.yaml")
		return code == http.StatusOK
	})
}

// waitFor polls cond until it holds or the time is up.
func waitFor(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not so after %s", limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sampleHeapPeak watches the allocated heap until the returned function is called, which tells
// the highest figure seen, in MiB.
func sampleHeapPeak() func() float64 {
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		var top uint64
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			top = max(top, m.HeapAlloc)
			select {
			case <-stop:
				done <- top
				return
			case <-tick.C:
			}
		}
	}()
	return func() float64 {
		close(stop)
		return float64(<-done) / (1 << 20)
	}
}

func TestWriteTimeoutEndsAClientThatStopsReading(t *testing.T) {
	const writeTimeout = time.Second
	root := t.TempDir()
	bigArchive(t, filepath.Join(objectDir(t, root), "big.tar.gz"), 8<<20)
	writeTarGz(t, filepath.Join(objectDir(t, root), "small.tar.gz"), []entry{{name: "a.yaml", body: "kind: A\n"}})
	o := Options{MaxYAMLViews: 1, WriteTimeout: writeTimeout}
	h := storeHandler(t, root, o)
	srv := httptest.NewUnstartedServer(nil)
	srv.Config = newHTTPServer("", h, o)
	closed := make(chan struct{}, 16)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	defer srv.Close()

	start := time.Now()
	c, resp := stalledClient(t, srv.Listener.Addr().String(), "/kclartifact/ns/app/big.yaml")
	defer c.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	select {
	case <-closed:
	case <-time.After(writeTimeout + 10*time.Second):
		t.Fatal("the server still holds the connection of a client that stopped reading")
	}
	t.Logf("connection closed by the server after %s", time.Since(start).Round(time.Millisecond))
	// What the client can still read is what the kernel had taken: the reply is cut short.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, resp.Body)
	t.Logf("the client then read %d of %d bytes and got %v", n, resp.ContentLength, err)
	if n >= resp.ContentLength {
		t.Fatalf("read %d of %d bytes: the reply was not cut", n, resp.ContentLength)
	}
	// The view's slot came back with the connection.
	if code, body, _ := get(t, srv.URL+"/kclartifact/ns/app/small.yaml"); code != http.StatusOK || body != "kind: A\n" {
		t.Fatalf("after the timeout: %d %q", code, body)
	}
}

func TestServerTimeouts(t *testing.T) {
	h := storeHandler(t, t.TempDir(), Options{})
	srv := newHTTPServer(":0", h, Options{})
	if srv.ReadHeaderTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Errorf("unbounded: %+v", srv)
	}
	if srv.WriteTimeout != DefaultWriteTimeout || srv.ReadTimeout < srv.WriteTimeout {
		t.Errorf("write timeout %s, read timeout %s", srv.WriteTimeout, srv.ReadTimeout)
	}
	if srv := newHTTPServer(":0", h, Options{WriteTimeout: time.Second}); srv.WriteTimeout != time.Second {
		t.Errorf("write timeout option ignored: %s", srv.WriteTimeout)
	}
}

func TestStartServesUntilCanceled(t *testing.T) {
	root := t.TempDir()
	writeTarGz(t, filepath.Join(objectDir(t, root), "a.tar.gz"), []entry{{name: "a.yaml", body: "kind: A\n"}})
	s, err := artifactstore.New(&config.Options{StoragePath: root, StorageAddress: "127.0.0.1:0", StorageAdvAddress: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- StartWithOptions(ctx, addr, s, Options{}) }()
	waitFor(t, 10*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/kclartifact/ns/app/a.tar.gz?token=" + s.Token("ns", "app", ""))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("StartWithOptions did not return once its context ended")
	}
}
