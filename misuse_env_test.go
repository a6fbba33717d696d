package offload_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

// TestEnvOutOfRange: an environment value a device kind cannot use is an
// error at Start wrapping ErrConfig that names the variable, the value and
// the accepted range — GOFFLOAD_HOST_CORES=1000000 used to start a million
// workers (24 s, 2.8 GB), and garbage in GOFFLOAD_REMOTE_SPIN or
// GOFFLOAD_DEVICE_CORES was ignored — whichever devices are named.
func TestEnvOutOfRange(t *testing.T) {
	maxCores := min(4096, max(64, 4*runtime.NumCPU()))
	cases := []struct{ env, val, want string }{
		{"GOFFLOAD_HOST_CORES", "1000000", fmt.Sprintf("from 1 to %d", maxCores)},
		{"GOFFLOAD_HOST_CORES", fmt.Sprint(maxCores + 1), fmt.Sprintf("from 1 to %d", maxCores)},
		{"GOFFLOAD_HOST_CORES", "0", "from 1 to"},
		{"GOFFLOAD_HOST_CORES", "two", "from 1 to"},
		{"GOFFLOAD_HOST_POOL_THRESHOLD", "-1", "from 0"},
		{"GOFFLOAD_HOST_POOL_THRESHOLD", "1MiB", "from 0"},
		{"GOFFLOAD_HOST_POOL_THRESHOLD", "99999999999999999999", "from 0"},
		{"GOFFLOAD_DEVICE_CORES", "lots", "from 1 to"},
		{"GOFFLOAD_DEVICE_CORES", "1000000", "from 1 to"},
		{"GOFFLOAD_LOCAL_LINK", "pipe", "shm (shared memory, the default) or socket"},
		{"GOFFLOAD_LOCAL_LINK", "SHM", "shm (shared memory, the default) or socket"},
		{"GOFFLOAD_REMOTE_SPIN", "fast", "from 0"},
		{"GOFFLOAD_REMOTE_SPIN", "100", "from 0"},
		{"GOFFLOAD_REMOTE_SPIN", "-1ms", "from 0"},
		{"GOFFLOAD_REMOTE_SPIN", "1h", "from 0"},
		{"GOFFLOAD_DEVICE_TIMEOUT", "abc", "at least 10ms"},
		{"GOFFLOAD_DEVICE_TIMEOUT", "1ms", "at least 10ms"},
		{"GOFFLOAD_DEVICE_TIMEOUT", "-5s", "at least 10ms"},
		{"GOFFLOAD_DEVICE_TIMEOUT", "8761h", "at most 8760h"},
		{"GOFFLOAD_STOP_GRACE", "soon", "at least 1ms"},
		{"GOFFLOAD_STOP_GRACE", "0", "at least 1ms"},
	}
	for _, c := range cases {
		t.Run(c.env+"="+c.val, func(t *testing.T) {
			t.Setenv(c.env, c.val)
			for _, devices := range []string{"host", ""} {
				opts := []offload.Option{offload.WithDevices(devices)}
				if devices == "" {
					opts = nil // the devices the plugins discover
					t.Setenv("GOFFLOAD_DEVICES", "")
				}
				err := offload.Start(opts...)
				if err == nil {
					offload.Stop()
					t.Fatalf("Start with %s=%s (devices %q) succeeded", c.env, c.val, devices)
				}
				msg := err.Error()
				if !errors.Is(err, offload.ErrConfig) || !strings.Contains(msg, c.env) || !strings.Contains(msg, fmt.Sprintf("%q", c.val)) || !strings.Contains(msg, c.want) {
					t.Errorf("%s=%s: %v; want ErrConfig naming the variable, the value and the range (%q)", c.env, c.val, err, c.want)
				}
			}
		})
	}
	// The bounds are accepted.
	t.Setenv("GOFFLOAD_HOST_CORES", fmt.Sprint(maxCores))
	t.Setenv("GOFFLOAD_HOST_POOL_THRESHOLD", "0")
	t.Setenv("GOFFLOAD_REMOTE_SPIN", "0")
	t.Setenv("GOFFLOAD_DEVICE_CORES", "1")
	start(t, offload.WithDevices("host"))
	if info, err := offload.On(0).Info(); err != nil || info.Cores != maxCores {
		t.Errorf("GOFFLOAD_HOST_CORES=%d: %+v, %v", maxCores, info, err)
	}
}
