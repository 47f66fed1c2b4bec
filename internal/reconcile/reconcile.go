// Package reconcile holds what the steps of a KCLArtifact reconcile return to the loop that runs
// them: a typed error that says which condition reason names the failure and what retrying it
// takes, modelled on source-controller's internal/error. A step returns no result besides it:
// what it found is in the state the steps hand each other, from which package summarize and the
// controller's summary derive conditions, events and the requeue.
package reconcile

import (
	"errors"
	"fmt"

	"github.com/fluxcd/pkg/apis/meta"
)

// Error is a failed step: the condition reason that names it, and what retrying it takes. An
// error that is not one is transient (Ready=False, reason Failed, retried with backoff).
type Error struct {
	Reason string
	Err    error
	// Stalled: retrying cannot help until the spec changes (Stalled=True, no requeue).
	Stalled bool
	// Transient: retried with the work queue's backoff, not after the retry interval.
	Transient bool
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Fail is a failure retried after the retry interval, or when an input changes.
func Fail(reason string, err error) *Error { return &Error{Reason: reason, Err: err} }

// Failf is Fail with a formatted message.
func Failf(reason, format string, args ...any) *Error {
	return Fail(reason, fmt.Errorf(format, args...))
}

// Stall is a failure only a new generation of the spec can mend.
func Stall(reason string, err error) *Error { return &Error{Reason: reason, Err: err, Stalled: true} }

// Stallf is Stall with a formatted message.
func Stallf(reason, format string, args ...any) *Error {
	return Stall(reason, fmt.Errorf(format, args...))
}

// As is err as an Error: its own, or a transient one with the reason Failed.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Reason: meta.FailedReason, Err: err, Transient: true}
}

// Deferrable tells whether a later step may go past the failure (a render that failed beside
// an artifact proven before): neither transient nor stalled, and named by its reason.
func Deferrable(err error) bool {
	var e *Error
	return errors.As(err, &e) && !e.Transient && !e.Stalled
}
