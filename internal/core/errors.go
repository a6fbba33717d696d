package core

import (
	"errors"
	"fmt"
)

// Errors of the runtime; every error it returns wraps one of these or a
// plugin error, so callers can tell them apart with errors.Is.
var (
	ErrConfig     = errors.New("invalid configuration")
	ErrNotStarted = errors.New("runtime not started")
	ErrNoDevice   = errors.New("no such device")
	ErrMandatory  = errors.New("offload is mandatory and the device is unavailable")
	ErrNotPresent = errors.New("not present on the device")
	ErrExtension  = errors.New("explicit extension not allowed")
	ErrBadMap     = errors.New("invalid map clause")
	ErrBadArg     = errors.New("invalid argument")
)

// MapError is returned for a map clause or data operation that cannot be
// done: it names the device, the buffer (host address, size and name) and
// what was expected.
type MapError struct {
	Device string  // "device 0 (host)"
	Op     string  // the construct: "target", "target enter data", …
	Clause string  // the clause: "map(present, to)"
	Name   string  // the buffer's name
	Addr   uintptr // host address of the buffer
	Size   int64   // its size in bytes
	Detail string  // what was expected and what was found
	Err    error   // the sentinel or cause
}

// Error describes the failure with the device, buffer and expectation.
func (e *MapError) Error() string {
	return fmt.Sprintf("goffload: %s: %s %s of %s (HstPtr=%#x, Size=%d): %s: %v",
		e.Device, e.Op, e.Clause, quoteName(e.Name), e.Addr, e.Size, e.Detail, e.Err)
}

// Unwrap returns the cause.
func (e *MapError) Unwrap() error { return e.Err }

func quoteName(n string) string {
	if n == "" {
		return "unnamed buffer"
	}
	return fmt.Sprintf("%q", n)
}
