package engine

import (
	"fmt"
	"os"
	"time"
)

// envTimeout names how long a link may stay silent before the process at
// the other end counts as lost.
const envTimeout = "GOFFLOAD_DEVICE_TIMEOUT"

// defaultTimeout is the device timeout when GOFFLOAD_DEVICE_TIMEOUT is
// unset: long enough for a loaded machine's pauses, short enough that a job
// learns of a hung device in well under a minute.
const defaultTimeout = 30 * time.Second

// ProcessStartup is the least time a device's hello may take where its
// process may still be starting (exec, the Go runtime, package inits: 10–20
// ms under -race on a loaded two-core machine for a local device), if more
// than the device timeout: a local device, an MPI rank.
const ProcessStartup = time.Second

// closeTimeout bounds how long closing a link waits for its queued frames
// to be written.
const closeTimeout = 2 * time.Second

// parseTimeout reads GOFFLOAD_DEVICE_TIMEOUT: a Go duration from 10ms to
// maxHelloTimeout (a year, 8760h: the most a hello may say), or 0 for no
// timeout (a hung device then hangs its callers). internal/core's
// CheckDeviceEnv checks it with the same rule at Start.
func parseTimeout(s string) (time.Duration, error) {
	if s == "" {
		return defaultTimeout, nil
	}
	d, err := time.ParseDuration(s)
	if s == "0" {
		d, err = 0, nil
	}
	if err != nil || d < 0 || (d > 0 && d < 10*time.Millisecond) || d > maxHelloTimeout {
		return 0, fmt.Errorf("%s=%q: want a duration of at least 10ms and at most 8760h (like 30s), or 0 for none", envTimeout, s)
	}
	return d, nil
}

// CheckTimeout explains a bad GOFFLOAD_DEVICE_TIMEOUT (a kind's Open
// returns it, so Start fails), or is nil.
func CheckTimeout() error {
	_, err := parseTimeout(os.Getenv(envTimeout))
	return err
}

// timing returns a live link's heartbeat interval and timeout
// (GOFFLOAD_DEVICE_TIMEOUT, read when the link goes live): a ping at least
// four times per timeout, and at least every second.
func timing() (interval, timeout time.Duration) {
	timeout, err := parseTimeout(os.Getenv(envTimeout))
	if err != nil {
		timeout = defaultTimeout
	}
	interval = time.Second
	if timeout > 0 && timeout/4 < interval {
		interval = max(timeout/4, 2*time.Millisecond)
	}
	return interval, timeout
}

// timingFor is timing for a link whose other side lets it stay silent for
// other (its device timeout, from its hello; 0 for none, -1 unknown): the
// heartbeat is also at least four times per other, so that a side with a
// shorter timeout than this one's hears from an idle link in time, whatever
// this side's own GOFFLOAD_DEVICE_TIMEOUT says. A host started with 500ms
// beside a tcp:// device started with the default (a ping a second) would
// otherwise find the idle device silent and lose it.
func timingFor(other time.Duration) (interval, timeout time.Duration) {
	interval, timeout = timing()
	if other > 0 && other/4 < interval {
		interval = max(other/4, 2*time.Millisecond)
	}
	return interval, timeout
}

// DeviceTimeout is how long a live link may stay silent before the
// process at its other end counts as lost (GOFFLOAD_DEVICE_TIMEOUT; 0:
// never).
func DeviceTimeout() time.Duration {
	_, timeout := timing()
	return timeout
}
