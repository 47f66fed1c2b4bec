// Package kclworker runs the KCL engine in worker processes: the engine cannot be cancelled, leaks
// its results, and a hostile program can crash it or exhaust memory, so the caller's process never
// loads it. A Pool re-executes the current binary with a hidden subcommand (Subcommand), talks to it
// over two dedicated pipes, kills it on timeout, limits its address space, and recycles it.
package kclworker

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// Subcommand is the hidden argument that turns the binary into a worker; main (and a TestMain that
// wants workers) calls ServeIfWorker first.
const Subcommand = "__kcl-worker"

// ServeIfWorker runs the worker and exits when the process was started as one.
func ServeIfWorker() {
	if len(os.Args) > 1 && os.Args[1] == Subcommand {
		os.Exit(Main())
	}
}

// maxFrame bounds one message, so a corrupt length cannot make either side allocate without limit.
const maxFrame = 1 << 30

const (
	statusOK    byte = 0
	statusError byte = 1
)

// writeFrame writes a length-prefixed frame made of the given parts.
func writeFrame(w io.Writer, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	buf := make([]byte, 4, 4+n)
	binary.BigEndian.PutUint32(buf, uint32(n))
	for _, p := range parts {
		buf = append(buf, p...)
	}
	_, err := w.Write(buf)
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return nil, fmt.Errorf("kcl worker frame of %d bytes exceeds the limit", n)
	}
	buf := make([]byte, n)
	_, err := io.ReadFull(r, buf)
	return buf, err
}

// A request frame is: method length (1 byte), method, protobuf arguments.
func encodeRequest(method string, args []byte) [][]byte {
	return [][]byte{{byte(len(method))}, []byte(method), args}
}

func decodeRequest(frame []byte) (string, []byte, error) {
	if len(frame) < 1 || int(frame[0]) > len(frame)-1 {
		return "", nil, fmt.Errorf("malformed kcl worker request")
	}
	n := int(frame[0])
	return string(frame[1 : 1+n]), frame[1+n:], nil
}
