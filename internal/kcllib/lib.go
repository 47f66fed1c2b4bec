// Package kcllib binds KCL's C service API, exported by the official KCL engine library, with purego.
//
// The engine is a Node addon: it links against Node-API symbols that only Node defines. Loading a
// stub library that defines them first (RTLD_GLOBAL) lets the dynamic loader resolve them, after
// which the C service API (kcl_service_*) works without Node. Callers must never load it in a
// long-lived process they care about: a hostile program can crash or exhaust it (see kclworker).
package kcllib

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

const (
	// LibName is the file name of the engine library in bin/ and beside the executable.
	LibName = "libkcl.so"
	// StubName is the file name of the Node-API stub library, looked up beside the engine library.
	StubName = "libnapistub.so"
	// EnvLib names the environment variable that points at the engine library.
	EnvLib = "KCL_LIB"
)

// Library is a loaded engine library.
type Library struct {
	Path string

	serviceNew    func(pluginAgent uint64) uintptr
	serviceDelete func(svc uintptr)
	serviceCall   func(svc uintptr, method *byte, args unsafe.Pointer, argsLen uintptr, resultLen *uintptr) *byte
	freeString    func(p *byte)
}

var (
	loadMu sync.Mutex
	loaded = map[string]*Library{}
)

// Candidates returns the places the engine library is looked for, in order: the explicit path,
// $KCL_LIB, beside the executable, and bin/ of the working directory.
func Candidates(explicit string) []string {
	var c []string
	if explicit != "" {
		c = append(c, explicit)
	}
	if env := os.Getenv(EnvLib); env != "" {
		c = append(c, env)
	}
	if exe, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		c = append(c, filepath.Join(filepath.Dir(exe), LibName))
	}
	return append(c, filepath.Join("bin", LibName))
}

// Find returns the first candidate that exists. An explicit path or $KCL_LIB that does not exist is
// an error of its own, because silently falling back would hide a misconfiguration.
func Find(explicit string) (string, error) {
	cands := Candidates(explicit)
	for i, p := range cands {
		if _, err := os.Stat(p); err == nil {
			return filepath.Abs(p)
		}
		if i == 0 && (explicit != "" || os.Getenv(EnvLib) != "") {
			return "", fmt.Errorf("KCL engine library %s does not exist; run `make libkcl` to fetch it", p)
		}
	}
	return "", fmt.Errorf("KCL engine library not found (looked in %s); run `make libkcl` to fetch it, "+
		"or point --kcl-lib or $%s at it", strings.Join(cands, ", "), EnvLib)
}

// Load finds and loads the engine library; loading the same path twice returns the same Library.
func Load(explicit string) (*Library, error) {
	path, err := Find(explicit)
	if err != nil {
		return nil, err
	}
	loadMu.Lock()
	defer loadMu.Unlock()
	if l, ok := loaded[path]; ok {
		return l, nil
	}
	l, err := open(path)
	if err != nil {
		return nil, err
	}
	loaded[path] = l
	return l, nil
}

func open(path string) (*Library, error) {
	stub := filepath.Join(filepath.Dir(path), StubName)
	if _, err := purego.Dlopen(stub, purego.RTLD_NOW|purego.RTLD_GLOBAL); err != nil {
		return nil, fmt.Errorf("loading the Node-API stub %s (run `make libkcl`): %w", stub, err)
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("loading the KCL engine %s (run `make libkcl`): %w", path, err)
	}
	l := &Library{Path: path}
	for name, fn := range map[string]any{
		"kcl_service_new":              &l.serviceNew,
		"kcl_service_delete":           &l.serviceDelete,
		"kcl_service_call_with_length": &l.serviceCall,
		"kcl_service_free_string":      &l.freeString,
	} {
		sym, err := purego.Dlsym(h, name)
		if err != nil {
			return nil, fmt.Errorf("KCL engine %s lacks %s: %w", path, name, err)
		}
		purego.RegisterFunc(fn, sym)
	}
	return l, nil
}

// ErrClosed is returned by calls on a deleted service.
var ErrClosed = errors.New("kcl service is closed")
