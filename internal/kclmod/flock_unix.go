//go:build unix

package kclmod

import (
	"errors"
	"os"
	"syscall"
)

// flockShared places a shared lock on f, waiting for an exclusive one to go.
func flockShared(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// flockTryExclusive places an exclusive lock on f if nobody holds one; false if somebody does.
func flockTryExclusive(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// sameFile reports whether f is still the file at path (it was not removed and recreated).
func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	if err != nil {
		return false
	}
	return os.SameFile(a, b)
}
