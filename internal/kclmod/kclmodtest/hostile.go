package kclmodtest

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Hostile is a tenant's server on 127.0.0.1 that lies: it answers every request with Handler and
// counts the bytes it managed to write, so that a test can tell how much of a huge answer the
// client read before it stopped.
type Hostile struct {
	Server *httptest.Server
	// Host is 127.0.0.1:<port>.
	Host string

	written  atomic.Int64
	requests atomic.Int64
}

// StartHostile starts a server answering with h; it is stopped when the test ends.
func StartHostile(t testing.TB, h func(w io.Writer, rw http.ResponseWriter, r *http.Request)) *Hostile {
	t.Helper()
	s := &Hostile{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		h(countingWriter{rw, &s.written}, rw, r)
	}))
	t.Cleanup(s.Server.Close)
	s.Host = strings.TrimPrefix(s.Server.URL, "http://")
	return s
}

// Written is how many body bytes the server wrote (the client read them, or the kernel's
// buffers hold them).
func (s *Hostile) Written() int64 { return s.written.Load() }

// Requests counts the requests the server received.
func (s *Hostile) Requests() int64 { return s.requests.Load() }

type countingWriter struct {
	w http.ResponseWriter
	n *atomic.Int64
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// WriteRepeated writes size bytes made of pattern, stopping at the first write error (the client
// hung up).
func WriteRepeated(w io.Writer, pattern string, size int64) {
	chunk := []byte(strings.Repeat(pattern, (64<<10)/len(pattern)+1))[:64<<10]
	for size > 0 {
		n := min(size, int64(len(chunk)))
		if _, err := w.Write(chunk[:n]); err != nil {
			return
		}
		size -= n
	}
}

// Drip writes one byte of s every interval until s is written or the client hangs up.
func Drip(w io.Writer, rw http.ResponseWriter, s string, interval time.Duration) {
	f, _ := rw.(http.Flusher)
	for i := range len(s) {
		if _, err := w.Write([]byte{s[i]}); err != nil {
			return
		}
		if f != nil {
			f.Flush()
		}
		time.Sleep(interval)
	}
}

// FakeCommit is the commit id the fake Git server advertises.
var FakeCommit = func() string {
	h := sha256.Sum256([]byte("kclmodtest fake commit"))
	return hex.EncodeToString(h[:20])
}()

func pktLine(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

// GitAdvertisement answers /info/refs?service=git-upload-pack for a repository whose default
// branch main is at FakeCommit, without side-band (the pack follows the NAK raw).
func GitAdvertisement(w io.Writer, rw http.ResponseWriter) {
	rw.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
	_, _ = io.WriteString(w, GitAdvertisementText)
}

// GitAdvertisementText is the body GitAdvertisement writes.
var GitAdvertisementText = pktLine("# service=git-upload-pack\n") + "0000" +
	pktLine(FakeCommit+" HEAD\x00shallow symref=HEAD:refs/heads/main agent=kclmodtest\n") +
	pktLine(FakeCommit+" refs/heads/main\n") + "0000"

// GitPackPreamble starts the answer to a shallow git-upload-pack request: the shallow update and
// the NAK; the pack follows.
func GitPackPreamble(w io.Writer, rw http.ResponseWriter) {
	rw.Header().Set("Content-Type", "application/x-git-upload-pack-result")
	_, _ = io.WriteString(w, pktLine("shallow "+FakeCommit+"\n")+"0000"+pktLine("NAK\n"))
}

// PackHeader is a pack's header claiming count objects.
func PackHeader(count uint32) []byte {
	b := []byte("PACK\x00\x00\x00\x02\x00\x00\x00\x00")
	binary.BigEndian.PutUint32(b[8:], count)
	return b
}

// FakeGitServer is a smart-HTTP Git server whose upload-pack answer is pack: it advertises
// refs/heads/main (GitAdvertisement), then sends the preamble and whatever pack writes.
func FakeGitServer(t testing.TB, pack func(w io.Writer)) *Hostile {
	return StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/info/refs"):
			GitAdvertisement(w, rw)
		case strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
			_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<20))
			GitPackPreamble(w, rw)
			pack(w)
		default:
			http.NotFound(rw, r)
		}
	})
}

// LyingPackServer is a Git server whose pack header claims count objects (4,294,967,295 at
// most): go-git allocates for all of them, and the Go runtime stops the process that tries.
func LyingPackServer(t testing.TB, count uint32) *Hostile {
	return FakeGitServer(t, func(w io.Writer) {
		_, _ = w.Write(PackHeader(count))
		WriteRepeated(w, "\x00", 1<<20)
	})
}

// ErrorServer answers every request with status and a body of size bytes made of pattern: a
// huge error body, or an internal service's answer that must never be echoed.
func ErrorServer(t testing.TB, status int, pattern string, size int64) *Hostile {
	return StartHostile(t, func(w io.Writer, rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/plain")
		rw.WriteHeader(status)
		WriteRepeated(w, pattern, size)
	})
}
