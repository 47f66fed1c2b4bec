package kclworker

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"github.com/kcl-flux/kcl-artifact-controller/internal/kcllib"
)

// Environment passed from the pool to a worker.
const (
	envLib         = "KCL_WORKER_LIB"
	envMemoryLimit = "KCL_WORKER_MEMORY_LIMIT"
)

// Main is the worker's entry point: it limits its own address space, loads the engine and serves
// calls on fd 3 (requests) and fd 4 (responses) until the pool closes fd 3. It returns an exit code.
// stdout is redirected to stderr by the pool, so anything the engine prints cannot corrupt a frame.
func Main() int {
	lib, err := kcllib.Load(os.Getenv(envLib))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kcl worker:", err)
		return 3
	}
	// The ceiling counts from here: mapping the engine itself is not the program's doing.
	if err := limitMemory(os.Getenv(envMemoryLimit)); err != nil {
		fmt.Fprintln(os.Stderr, "kcl worker:", err)
		return 2
	}
	// The engine keeps thread-local state; keep every call on one OS thread.
	runtime.LockOSThread()
	svc := lib.NewService()
	in := bufio.NewReader(os.NewFile(3, "requests"))
	out := os.NewFile(4, "responses")
	if err := serve(svc, in, out); err != nil {
		fmt.Fprintln(os.Stderr, "kcl worker:", err)
		return 4
	}
	return 0
}

// caller is the engine as the worker loop sees it.
type caller interface {
	Call(method string, args []byte) ([]byte, error)
}

func serve(svc caller, in io.Reader, out io.Writer) error {
	for {
		frame, err := readFrame(in)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		method, args, err := decodeRequest(frame)
		if err != nil {
			return err
		}
		res, callErr := svc.Call(method, args)
		if callErr != nil {
			err = writeFrame(out, []byte{statusError}, []byte(callErr.Error()))
		} else {
			err = writeFrame(out, []byte{statusOK}, res)
		}
		if err != nil {
			return err
		}
	}
}

func limitMemory(v string) error {
	if v == "" || v == "0" {
		return nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return fmt.Errorf("bad %s=%q: %w", envMemoryLimit, v, err)
	}
	// RLIMIT_AS bounds the whole address space, so add what is mapped already.
	n += mappedBytes()
	return syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: n, Max: n})
}

// mappedBytes is the process's current virtual size (VmSize), or 0 when unknown.
func mappedBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var pages uint64
	if _, err := fmt.Sscan(string(b), &pages); err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}
