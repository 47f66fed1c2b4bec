package ocipush

import (
	"github.com/kcl-flux/kcl-artifact-controller/internal/kclmod"
)

// Reasons of an Error.
const (
	// ReasonInvalid: the request cannot be pushed as given (the repository, the artifact).
	ReasonInvalid = "InvalidRequest"
	// ReasonSign: signing or writing the provenance failed.
	ReasonSign = "SignFailed"
	// ReasonRegistry: the registry refused the push or could not be reached.
	ReasonRegistry = "RegistryFailed"
	// ReasonRefused: what a pull found did not verify (its signature, its provenance): the
	// registry answered, the artifact is not the one asked for.
	ReasonRefused = "Refused"
	// ReasonHostNotAllowed: the network guard refused the registry's host or address.
	ReasonHostNotAllowed = "HostNotAllowed"
	// ReasonTimeout: the push did not finish in time (or waited too long for a slot).
	ReasonTimeout = "Timeout"
	// ReasonMemory: the push process went over its memory limit.
	ReasonMemory = "MemoryLimit"
	// ReasonCrash: the push process died without an answer.
	ReasonCrash = "Crashed"
)

// Error is a push that failed, with why. Detail never quotes a registry's answer: the status
// code and the guard's reasons only.
type Error struct {
	Reason, Detail string
}

func (e *Error) Error() string { return e.Detail }

// Unwrap keeps kclmod.ErrHostNotAllowed in the chain of a refused host.
func (e *Error) Unwrap() error {
	if e.Reason == ReasonHostNotAllowed {
		return kclmod.ErrHostNotAllowed
	}
	return nil
}
