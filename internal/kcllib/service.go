package kcllib

import (
	"bytes"
	"errors"
	"sync"
	"unsafe"
)

// errorPrefix marks a failed call: the engine returns the error text instead of a message.
var errorPrefix = []byte("ERROR:")

// Service is one engine service instance. Calls are serialised: the engine keeps per-service state.
type Service struct {
	mu  sync.Mutex
	lib *Library
	ptr uintptr
}

// NewService creates an engine service without a plugin agent (plugins are not supported).
func (l *Library) NewService() *Service {
	return &Service{lib: l, ptr: l.serviceNew(0)}
}

// Close deletes the service.
func (s *Service) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr != 0 {
		s.lib.serviceDelete(s.ptr)
		s.ptr = 0
	}
}

// Call invokes a method such as "KclService.ExecProgram" with a protobuf-encoded argument message
// and returns the protobuf-encoded result. An engine-level failure becomes an error.
func (s *Service) Call(method string, args []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ptr == 0 {
		return nil, ErrClosed
	}
	m := append([]byte(method), 0)
	var argp unsafe.Pointer
	if len(args) > 0 {
		argp = unsafe.Pointer(&args[0])
	}
	var n uintptr
	res := s.lib.serviceCall(s.ptr, &m[0], argp, uintptr(len(args)), &n)
	if res == nil {
		return nil, errors.New("kcl engine returned no result for " + method)
	}
	out := bytes.Clone(unsafe.Slice(res, n))
	if bytes.HasPrefix(out, errorPrefix) {
		return nil, &EngineError{Message: string(bytes.TrimSpace(out[len(errorPrefix):]))}
	}
	return out, nil
}

// EngineError is a failure the engine itself reported for a call, such as a syntax error.
type EngineError struct{ Message string }

func (e *EngineError) Error() string { return e.Message }
