package fluxenv

import (
	"bytes"
	"fmt"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// S3Server is an S3-compatible object store (gofakes3, in memory) served over plain HTTP on
// 127.0.0.1, for Buckets of source-controller's `generic` provider with `insecure: true`.
//
// gofakes3 has no authentication of its own. The server therefore refuses, with S3's
// InvalidAccessKeyId, every request whose SigV4 credential (Authorization header or presigned
// query) does not name AccessKey: a Bucket must send the access key of its Secret. The
// signature itself is not verified, so SecretKey is accepted whatever it is; that is the one
// part of S3 authentication these tests do not cover.
type S3Server struct {
	Endpoint  string // 127.0.0.1:<Port>, the Bucket's spec.endpoint
	Port      int
	AccessKey string
	SecretKey string
	LogPath   string // one line per request

	backend *s3mem.Backend
	srv     *http.Server
	logFile *os.File
	log     *log.Logger
}

// StartS3Server serves a new, empty object store on a free port of 127.0.0.1.
func StartS3Server(logPath, accessKey, secretKey string) (*S3Server, error) {
	ln, logFile, err := listenLogged(logPath)
	if err != nil {
		return nil, err
	}
	s := &S3Server{
		Port: ln.Addr().(*net.TCPAddr).Port, AccessKey: accessKey, SecretKey: secretKey, LogPath: logPath,
		backend: s3mem.New(), logFile: logFile, log: log.New(logFile, "s3: ", log.LstdFlags),
	}
	s.Endpoint = loopback(s.Port)
	faker := gofakes3.New(s.backend, gofakes3.WithAutoBucket(false))
	s.srv = &http.Server{Handler: s.authenticate(faker.Server()), ReadHeaderTimeout: 10 * time.Second}
	go s.srv.Serve(ln) //nolint:errcheck // ends with Stop
	return s, nil
}

// authenticate lets through the requests signed with AccessKey.
func (s *S3Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := accessKeyOf(r)
		s.log.Printf("%s %s access key %q", r.Method, r.URL.RequestURI(), key)
		if key != s.AccessKey {
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId</Code>`+
				`<Message>The AWS Access Key Id you provided does not exist in our records.</Message></Error>`)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// accessKeyOf reads the access key ID from a SigV4 credential: `Credential=<key>/<scope>`.
func accessKeyOf(r *http.Request) string {
	cred := r.URL.Query().Get("X-Amz-Credential")
	if _, after, ok := strings.Cut(r.Header.Get("Authorization"), "Credential="); ok {
		cred = after
	}
	key, _, _ := strings.Cut(cred, "/")
	return key
}

// CreateBucket creates a bucket.
func (s *S3Server) CreateBucket(name string) error { return s.backend.CreateBucket(name) }

// Put writes each object of files (key → content) into bucket.
func (s *S3Server) Put(bucket string, files map[string]string) error {
	for key, content := range files {
		// What gofakes3 records for an object put over HTTP, which GET and HEAD answer with
		// (minio-go, in source-controller, requires Last-Modified).
		meta := map[string]string{"Last-Modified": time.Now().UTC().Format(http.TimeFormat), "Content-Type": "application/octet-stream"}
		if _, err := s.backend.PutObject(bucket, key, meta, bytes.NewReader([]byte(content)),
			int64(len(content)), nil); err != nil {
			return fmt.Errorf("putting s3://%s/%s: %w", bucket, key, err)
		}
	}
	return nil
}

// PutDir writes every regular file under dir into bucket, under prefix + its slash-separated
// path relative to dir.
func (s *S3Server) PutDir(bucket, prefix, dir string) error {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		files[prefix+filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		return err
	}
	return s.Put(bucket, files)
}

// Stop closes the server.
func (s *S3Server) Stop() error {
	err := s.srv.Close()
	s.logFile.Close()
	return err
}
