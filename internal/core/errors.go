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
	ErrNotStarted  = errors.New("runtime not started")
	ErrNoDevice    = errors.New("no such device")
	ErrMandatory   = errors.New("offload is mandatory and the device is unavailable")
	ErrUnavailable = errors.New("the device is unavailable; OMP_TARGET_OFFLOAD is not MANDATORY, so its work runs on the initial device")
	ErrNotPresent  = errors.New("not present on the device")
	ErrExtension   = errors.New("explicit extension not allowed")
	ErrBadMap      = errors.New("invalid map clause")
	ErrBadArgument = errors.New("invalid argument")
)

// MapError is the error of a map clause or data routine that cannot be
// done (package plugin declares it, for package offload to share).
type MapError = plugin.MapError

// unnamed is how errors show a buffer without a name (the info output says
// Name=unknown, as libomptarget's does).
const unnamed = "unnamed buffer"

// QuoteName is how errors show a buffer's name (plugin.QuoteName).
var QuoteName = plugin.QuoteName

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

// Errorf is fmt.Errorf for the runtime's messages, which start with
// "goffload: ": each error among args is quoted (Quote), so that the
// message says it once.
func Errorf(format string, args ...any) error {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = Quote(err)
		}
	}
	return fmt.Errorf(format, args...)
}

// errPrefix starts the runtime's error messages.
const errPrefix = "goffload: "

// Quote is err as the cause inside another of the runtime's errors: the
// same error, whose text drops its own leading "goffload: ", so that the
// message says it once, at its start.
func Quote(err error) error {
	if err == nil || !strings.HasPrefix(err.Error(), errPrefix) {
		return err
	}
	return quoted{err}
}

// quoted is an error quoted inside another (Quote).
type quoted struct{ err error }

func (q quoted) Error() string { return strings.TrimPrefix(q.err.Error(), errPrefix) }
func (q quoted) Unwrap() error { return q.err }
