package kclworker

import (
	"fmt"
	"strings"
	"sync"
)

// Reason classifies why a worker was lost.
type Reason string

// Reasons a render fails without an engine answer.
const (
	ReasonTimeout  Reason = "Timeout"
	ReasonCanceled Reason = "Canceled"
	ReasonMemory   Reason = "MemoryLimit"
	ReasonCrash    Reason = "Crashed"
	// ReasonProtocol is an answer without the request's nonce, or more than one answer: something
	// other than the worker loop wrote to the channel.
	ReasonProtocol Reason = "ProtocolViolation"
)

// OutputTooLargeError is a render whose output passed Options.MaxOutput. The worker sent it in
// place of the output, and stays in use.
type OutputTooLargeError struct{ Size, Max uint64 }

const outputTooLargePrefix = "kcl output too large: "

func (e *OutputTooLargeError) Error() string {
	return fmt.Sprintf("%sabout %d bytes, over the limit of %d bytes", outputTooLargePrefix, e.Size, e.Max)
}

func parseOutputTooLarge(msg string) error {
	e := &OutputTooLargeError{}
	if _, err := fmt.Sscanf(strings.TrimPrefix(msg, outputTooLargePrefix), "about %d bytes, over the limit of %d bytes", &e.Size, &e.Max); err != nil {
		return &WorkerError{Reason: ReasonProtocol, Detail: "malformed output-size answer"}
	}
	return e
}

// WorkerError is a render that ended with the worker process gone.
type WorkerError struct {
	Reason Reason
	Detail string
}

func (e *WorkerError) Error() string {
	return fmt.Sprintf("KCL render failed (%s): %s", e.Reason, e.Detail)
}

// tail keeps the last bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTail(max int) *tail { return &tail{max: max} }

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
