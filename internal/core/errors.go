package core

import (
	"errors"
	"fmt"
	"strings"

	"github.com/goffload/offload/plugin"
)

// Errors of the runtime; every error it returns wraps one of these or a
// plugin error, so callers can tell them apart with errors.Is.
var (
	ErrConfig      = errors.New("invalid configuration")
	ErrNotStarted  = errors.New("runtime not started")
	ErrNoDevice    = errors.New("no such device")
	ErrMandatory   = errors.New("offload is mandatory and the device is unavailable")
	ErrUnavailable = errors.New("the device is unavailable; OMP_TARGET_OFFLOAD is not MANDATORY, so its work runs on the initial device")
	ErrNotPresent  = errors.New("not present on the device")
	ErrExtension   = errors.New("explicit extension not allowed")
	ErrBadMap      = errors.New("invalid map clause")
	ErrBadArgument = errors.New("invalid argument")
)

// MapError is returned for a map clause or data operation that cannot be
// done: it names the device, the buffer (host address, size and name) and
// what was expected.
type MapError struct {
	Device string  // "device 0 (host)"
	Op     string  // the construct or routine: "target", "target enter data", "omp_target_associate_ptr", …
	Clause string  // the clause: "map(present, to)", "to(present: y)" (target update); empty for a memory routine
	Name   string  // the buffer's name
	Addr   uintptr // host address of the buffer
	Size   int64   // its size in bytes
	Detail string  // what was expected and what was found
	Err    error   // the sentinel or cause
}

// Error describes the failure with the device, buffer and expectation.
func (e *MapError) Error() string {
	what := e.Op + " of " + QuoteName(e.Name) // a memory routine
	switch {
	case strings.HasPrefix(e.Clause, "map("):
		what = e.Op + " " + e.Clause + " of " + QuoteName(e.Name)
	case e.Clause != "": // a motion clause names the buffer itself: target update to(y)
		what = e.Op + " " + e.Clause
	}
	if errors.Is(e.Err, plugin.ErrDeviceLost) {
		// The loss is the news: what was being done when it showed comes
		// after it.
		return fmt.Sprintf("goffload: %s: %v (during %s (HstPtr=%#x, Size=%d): %s)",
			e.Device, e.Err, what, e.Addr, e.Size, e.Detail)
	}
	return fmt.Sprintf("goffload: %s: %s (HstPtr=%#x, Size=%d): %s: %v",
		e.Device, what, e.Addr, e.Size, e.Detail, e.Err)
}

// Unwrap returns the cause.
func (e *MapError) Unwrap() error { return e.Err }

// unnamed is how errors show a buffer without a name (the info output says
// Name=unknown, as libomptarget's does).
const unnamed = "unnamed buffer"

// QuoteName is how errors show a buffer's name: quoted, or "unnamed
// buffer".
func QuoteName(n string) string {
	if n == "" {
		return unnamed
	}
	return fmt.Sprintf("%q", n)
}

// mappingName shows a mapping's name inside an error's detail: "Name=x",
// or "unnamed buffer".
func mappingName(n string) string {
	if n == "" {
		return unnamed
	}
	return "Name=" + n
}

// reason is a MapError's cause in its own words, where the sentinel's text
// would say something else (an update "extends" nothing); errors.Is still
// matches the sentinel.
type reason struct {
	text string
	is   error
}

func (r *reason) Error() string { return r.text }
func (r *reason) Unwrap() error { return r.is }
