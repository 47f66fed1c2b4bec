// Package kclworker runs the KCL engine in worker processes: the engine cannot be cancelled, leaks
// its results, and a hostile program can crash it, exhaust memory or try to reach what it must
// not, so the caller's process never loads it. A Pool starts workers with a hidden subcommand
// (Subcommand): the kcl-worker binary beside the executable (cmd/kcl-worker, the worker alone)
// when it is there, else the current binary (DefaultCommand). It keeps workers per trust domain
// (a namespace), confines them
// (internal/sandbox), talks to each over a socketpair with a nonce per request, kills a worker on
// timeout or on any protocol violation, limits its memory, and recycles it.
package kclworker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// Subcommand is the hidden argument that turns the binary into a worker; main (and a TestMain that
// wants workers) calls ServeIfWorker first.
const Subcommand = "__kcl-worker"

// protocolVersion is what a pool and its workers speak: the frames, the request and answer
// encodings and the worker's arguments. Bump it with any change to them: the worker may be a
// kcl-worker binary of another build than the controller beside it, and it then refuses to serve
// with a reason (the controller's first render at startup reports it) instead of misreading.
const protocolVersion = 1

// anotherBuild says that the worker binary at path does not match the pool that started it; the
// worker says so when it can, the pool when the worker is too old to (deathCause).
func anotherBuild(path string) string {
	return path + " is " + anotherBuildMark + "; install the kcl-worker of its build beside it"
}

const anotherBuildMark = "of another build than the controller"

// ServeIfWorker runs the worker and exits when the process was started as one.
func ServeIfWorker() {
	if len(os.Args) > 1 && os.Args[1] == Subcommand {
		os.Exit(Main(os.Args[2:]))
	}
}

// maxRequest bounds a request frame (arguments and settings, never output).
const maxRequest = 64 << 20

// maxAnswer is the largest answer for a rendered output bound: the engine answers with the
// output twice (YAML and JSON) plus messages.
func maxAnswer(maxOutput uint64) uint64 { return 2*maxOutput + 1<<20 }

// FrameTooLargeError is a frame that announces more bytes than allowed; nothing was allocated.
type FrameTooLargeError struct{ Size, Max uint64 }

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("kcl worker frame of %d bytes exceeds the limit of %d", e.Size, e.Max)
}

const (
	statusOK    byte = 0
	statusError byte = 1
)

// nonceSize is the length of the random value a request carries and its answer must echo: a
// program that manages to write to the channel cannot know it.
const nonceSize = 16

type nonce [nonceSize]byte

func newNonce() (nonce, error) {
	var n nonce
	_, err := rand.Read(n[:])
	return n, err
}

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

// readFrame reads one frame, refusing one longer than max before allocating it.
func readFrame(r io.Reader, max uint64) ([]byte, error) {
	return readFrameReserved(r, max, nil)
}

// readFrameReserved is readFrame that first has reserve accept the frame's size, so that the
// caller's memory budget is taken before the frame is allocated.
func readFrameReserved(r io.Reader, max uint64, reserve func(size uint64) error) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if uint64(n) > max {
		return nil, &FrameTooLargeError{Size: uint64(n), Max: max}
	}
	if reserve != nil {
		if err := reserve(uint64(n)); err != nil {
			return nil, &reserveError{err}
		}
	}
	buf := make([]byte, n)
	_, err := io.ReadFull(r, buf)
	return buf, err
}

// reserveError is a frame not read because its memory could not be reserved.
type reserveError struct{ err error }

func (e *reserveError) Error() string { return "reserving memory for the answer: " + e.err.Error() }
func (e *reserveError) Unwrap() error { return e.err }

// request is one engine call: a nonce, the working directory of the render, the method and the
// protobuf arguments.
type request struct {
	nonce    nonce
	yamlOnly bool // drop the JSON form of an ExecProgram result
	dir      string
	method   string
	args     []byte
	// reserve, when set, takes the answer's size from the caller's memory budget before it is
	// read; it is not sent.
	reserve func(ctx context.Context, size uint64) error
}

// A request frame is: nonce, flags (1 byte), dir length (2 bytes), dir, method length (1 byte),
// method, arguments.
func (r request) encode() [][]byte {
	var dl [2]byte
	binary.BigEndian.PutUint16(dl[:], uint16(len(r.dir)))
	var flags byte
	if r.yamlOnly {
		flags = 1
	}
	return [][]byte{r.nonce[:], {flags}, dl[:], []byte(r.dir), {byte(len(r.method))}, []byte(r.method), r.args}
}

func decodeRequest(f []byte) (request, error) {
	var r request
	bad := fmt.Errorf("malformed kcl worker request")
	if len(f) < nonceSize+3 {
		return r, bad
	}
	copy(r.nonce[:], f)
	r.yamlOnly = f[nonceSize]&1 != 0
	f = f[nonceSize+1:]
	dl := int(binary.BigEndian.Uint16(f))
	f = f[2:]
	if dl+1 > len(f) {
		return r, bad
	}
	r.dir, f = string(f[:dl]), f[dl:]
	ml := int(f[0])
	f = f[1:]
	if ml > len(f) {
		return r, bad
	}
	r.method, r.args = string(f[:ml]), f[ml:]
	return r, nil
}

// An answer frame is: the request's nonce, a status byte, the result or error text.
func encodeAnswer(n nonce, status byte, payload []byte) [][]byte {
	return [][]byte{n[:], {status}, payload}
}

// checkAnswer returns the status and payload of an answer to the request with nonce n, or an
// error when the frame is not that answer.
func checkAnswer(n nonce, f []byte) (byte, []byte, error) {
	if len(f) < nonceSize+1 || !bytes.Equal(f[:nonceSize], n[:]) {
		return 0, nil, fmt.Errorf("the answer does not carry the request's nonce")
	}
	st := f[nonceSize]
	if st != statusOK && st != statusError {
		return 0, nil, fmt.Errorf("unknown answer status %d", st)
	}
	return st, f[nonceSize+1:], nil
}
