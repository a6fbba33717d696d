package gpukind

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/goffload/offload/plugin"
)

// LibraryPath returns the driver library named by the environment
// variable env (GOFFLOAD_CUDA_LIBRARY, say), or def where it is unset.
func LibraryPath(env, def string) string {
	if p := strings.TrimSpace(os.Getenv(env)); p != "" {
		return p
	}
	return def
}

// Drivers is a kind's drivers by library path, each loaded and set up once
// per process. A driver's initialization cannot be undone. A driver that
// failed says why every time. The zero Drivers is ready for use. Its methods
// are safe for concurrent use.
type Drivers[S any] struct {
	mu     sync.Mutex
	byPath map[string]*S
}

// Get returns the driver at path, made by load at the first call for path.
// The calls for a path wait for that one.
func (ds *Drivers[S]) Get(path string, load func(path string) *S) *S {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if s, ok := ds.byPath[path]; ok {
		return s
	}
	s := load(path)
	if ds.byPath == nil {
		ds.byPath = map[string]*S{}
	}
	ds.byPath[path] = s
	return s
}

// LoadFailure is why a kind has no driver when its library at path did not
// load with err. Where the file is missing, it is "no <missing> (<path> not
// found)". Else it is "no usable <unusable>: <err>".
func LoadFailure(err error, path, missing, unusable string) error {
	var u interface{ Unwrap() error }
	if errors.As(err, &u) && u.Unwrap() != nil && strings.Contains(u.Unwrap().Error(), "No such file") {
		return fmt.Errorf("no %s (%s not found)", missing, path)
	}
	return fmt.Errorf("no usable %s: %w", unusable, err)
}

// SpecNumber reads the N of the spec "kind:N" from arg. It returns -1 for ""
// (every device). Anything but a number from 0 is an error wrapping
// plugin.ErrBadSpec. The error says what the kind wants.
func SpecNumber(kind, arg, want string) (int, error) {
	if arg == "" {
		return -1, nil
	}
	v, err := strconv.Atoi(arg)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%w: %s:%s: want %s", plugin.ErrBadSpec, kind, arg, want)
	}
	return v, nil
}

// NoDriver is the error of opening devices when the kind has no driver, for
// the reason why. For every device (all: the spec names no number), it wraps
// plugin.ErrNoDevices. So the kind has none and the program goes on. For one
// device it is the reason itself.
func NoDriver(why error, all bool) error {
	if all {
		return fmt.Errorf("%w: %v", plugin.ErrNoDevices, why)
	}
	return why
}
