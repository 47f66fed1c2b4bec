package kclmodtest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
)

func gzipBytes(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// EmptyFilesTarGz returns a gzip-compressed tar of a kcl.mod and n empty files (e000000.k, ...):
// an archive far larger unpacked than compressed (a million entries are about 512 MB of tar,
// a few MB of gzip).
func EmptyFilesTarGz(n int) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	mod := []byte("[package]\nname = \"many\"\nversion = \"0.0.1\"\n")
	if err := tw.WriteHeader(&tar.Header{Name: "kcl.mod", Mode: 0o644, Size: int64(len(mod)), Typeflag: tar.TypeReg}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(mod); err != nil {
		return nil, err
	}
	for i := range n {
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("e%06d.k", i), Mode: 0o644, Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// TarGz is a gzipped tar of regular files, names used as given (tests write "../x" with it).
func TarGz(files map[string]string) []byte {
	b, _ := gzipBytes(Tar(files))
	return b
}

// Tar is an uncompressed tar of regular files, names used as given.
func Tar(files map[string]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte(body))
	}
	_ = tw.Close()
	return buf.Bytes()
}
