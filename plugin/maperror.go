package plugin

import (
	"errors"
	"fmt"
	"strings"
)

// MapError is the runtime's error of a map clause or data routine that
// cannot be done. The runtime makes it; a kind never needs to. It is here,
// beside the errors it wraps, so that the runtime's packages and package
// offload (as offload.MapError) share one type.
type MapError struct {
	// Device names the device: "device 0 (host)".
	Device string
	// Op is the construct or routine: "target", "target enter data",
	// "omp_target_associate_ptr", …
	Op string
	// Clause is the clause: "map(present, to)", or "to(present: y)" for a
	// target update; empty for a memory routine.
	Clause string
	// Name is the buffer's name; empty if it has none.
	Name string
	// Addr is the host address of the buffer.
	Addr uintptr
	// Size is its size in bytes.
	Size int64
	// Detail says what was expected and what was found.
	Detail string
	// Err is the cause: a sentinel error (offload.ErrNotPresent,
	// ErrExtension, ErrBadMap, ErrDeviceLost, …) or a device's error.
	Err error
}

// Error describes the failure with the device, the buffer and what was
// expected.
func (e *MapError) Error() string {
	what := e.Op + " of " + QuoteName(e.Name) // a memory routine
	switch {
	case strings.HasPrefix(e.Clause, "map("):
		what = e.Op + " " + e.Clause + " of " + QuoteName(e.Name)
	case e.Clause != "": // a motion clause names the buffer itself: target update to(y)
		what = e.Op + " " + e.Clause
	}
	if errors.Is(e.Err, ErrDeviceLost) {
		// The loss is the news: what was being done when it showed comes
		// after it.
		return fmt.Sprintf("goffload: %s: %v (during %s (HstPtr=%#x, Size=%d): %s)",
			e.Device, e.Err, what, e.Addr, e.Size, e.Detail)
	}
	return fmt.Sprintf("goffload: %s: %s (HstPtr=%#x, Size=%d): %s: %v",
		e.Device, what, e.Addr, e.Size, e.Detail, e.Err)
}

// Unwrap returns the cause, Err.
func (e *MapError) Unwrap() error { return e.Err }

// QuoteName is how errors show a buffer's name: quoted, or "unnamed
// buffer".
func QuoteName(n string) string {
	if n == "" {
		return "unnamed buffer"
	}
	return fmt.Sprintf("%q", n)
}
