package engine

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
)

// hello is what each side says about itself at the start of a session.
type hello struct {
	version int
	digest  string // of the whole kernel table
	count   int    // kernels in the table
	// timeout is the sender's device timeout (GOFFLOAD_DEVICE_TIMEOUT), 0 for
	// none. It says how long the sender lets the link stay silent. It is -1
	// where its hello does not say; this side then pings often enough for it
	// (timingFor).
	timeout time.Duration
	// The sender's architecture and layouts (see layout.go), where its
	// hello says them (hasArch, hasGlobals).
	hasArch, hasGlobals bool
	arch                archFacts
	types, globals      sumList
}

// helloText is this process's hello. It holds the magic, the protocol
// version, the kernel table's digest and size, and the device timeout in
// microseconds. Then come key=value fields. arch= is the architecture:
// GOARCH, word size, alignment of 8-byte values, byte order
// (arch=amd64/8/8/le). kt= is the layout hashes of the kernels' parameter
// types. gt= is those of the declare target variables' elements. A reader
// ignores keys it does not know.
func helloText(img *plugin.Image) string {
	_, timeout := timing()
	gs, _ := entries.Globals()
	l := layoutOf(img.Kernels, gs)
	return fmt.Sprintf("%s %d %s %d %d arch=%s kt=%s gt=%s", proto.Magic, proto.Version, img.Digest, len(img.Kernels), timeout.Microseconds(),
		l.arch, sumsText(l.sums), sumsText(l.gsums))
}

func parseHello(s string) (hello, error) {
	f := strings.Fields(s)
	if len(f) < 4 || f[0] != proto.Magic {
		return hello{}, fmt.Errorf("%w: not a goffload hello: %.40q", proto.ErrFrame, s)
	}
	v, err1 := strconv.Atoi(f[1])
	n, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || n < 0 || len(f[2]) != 16 {
		return hello{}, fmt.Errorf("%w: malformed hello %.60q", proto.ErrFrame, s)
	}
	h := hello{version: v, digest: f[2], count: n, timeout: -1}
	if len(f) >= 5 {
		us, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil || us < 0 || us > int64(maxHelloTimeout/time.Microsecond) {
			return hello{}, fmt.Errorf("%w: malformed hello %.60q: bad device timeout", proto.ErrFrame, s)
		}
		h.timeout = time.Duration(us) * time.Microsecond
	}
	if len(f) > 5 {
		if err := h.parseFields(f[5:]); err != nil {
			return hello{}, fmt.Errorf("%w: malformed hello %.60q: %v", proto.ErrFrame, s, err)
		}
	}
	return h, nil
}

// parseFields reads a hello's key=value fields into h.
func (h *hello) parseFields(f []string) error {
	seen := map[string]bool{}
	for _, kv := range f {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("field %.20q is not key=value", kv)
		}
		if seen[k] {
			return fmt.Errorf("field %.20q twice", k)
		}
		seen[k] = true
		switch k {
		case "arch":
			if h.arch, h.hasArch = parseArch(v); !h.hasArch {
				return fmt.Errorf("bad architecture %.40q", v)
			}
		case "kt":
			if h.types, ok = parseSums(v); !ok {
				return fmt.Errorf("bad parameter type layouts")
			}
		case "gt":
			if h.globals, h.hasGlobals = parseSums(v); !h.hasGlobals {
				return fmt.Errorf("bad declare target variable layouts")
			}
		}
	}
	if h.hasArch != seen["kt"] {
		return fmt.Errorf("an architecture without parameter type layouts, or layouts without an architecture")
	}
	return nil
}

// maxHelloTimeout bounds the device timeout a hello may say: a year. Any more
// is taken as a malformed hello, not a wish to wait.
const maxHelloTimeout = 365 * 24 * time.Hour

// checkImage compares the peer's hello with our image. Both sides must run
// the same code. The protocol version must match. The shorter kernel table
// must be a prefix of the longer one. (A host may register kernels its device
// processes have not, and cannot launch those remotely.) The side with the
// longer table does the check.
//
// It checks too that the memory of the kernels' parameters and the declare
// target variables is laid out alike on both sides (checkLayout). A peer of
// another architecture may serve where it is. Where it is not, it is refused,
// naming what differs.
func checkImage(peer hello, img *plugin.Image, self string) error {
	gs, _ := entries.Globals()
	return checkImageWith(peer, img, gs, self)
}

// checkImageWith is checkImage with the declare target variables gs.
func checkImageWith(peer hello, img *plugin.Image, gs []*entries.Global, self string) error {
	other := "host"
	if self == "host" {
		other = "device"
	}
	if peer.version != proto.Version {
		return fmt.Errorf("%w: protocol version %d on the %s, %d on the %s", ErrMismatch, peer.version, other, proto.Version, self)
	}
	if peer.count > len(img.Kernels) {
		return nil // the peer checks
	}
	if entries.Digest(img.Kernels[:peer.count]) != peer.digest {
		return fmt.Errorf("%w: host and device were built from different code: %s image %s (%d kernels), %s image %s (%d kernels)",
			ErrMismatch, self, img.Digest, len(img.Kernels), other, peer.digest, peer.count)
	}
	return checkLayout(peer, layoutOf(img.Kernels[:peer.count], gs), self)
}

// ErrMismatch is wrapped when a host and a device process run different code:
// their kernel tables or protocol versions differ. They are refused at hello.
var ErrMismatch = proto.ErrMismatch

// envTimeout names how long a link may stay silent before the process at the
// other end counts as lost.
const envTimeout = "GOFFLOAD_DEVICE_TIMEOUT"

// defaultTimeout is the device timeout when GOFFLOAD_DEVICE_TIMEOUT is unset.
// It is long enough for a loaded machine's pauses. It is short enough that a
// job learns of a hung device in well under a minute.
const defaultTimeout = 30 * time.Second

// ProcessStartup is the least time a device's hello may take where its
// process may still be starting, if more than the device timeout. That is a
// local device, or an MPI rank. Starting is exec, the Go runtime and package
// inits. It takes 10–20 ms under -race on a loaded two-core machine for a
// local device.
const ProcessStartup = time.Second

// closeTimeout bounds how long closing a link waits for its queued frames
// to be written.
const closeTimeout = 2 * time.Second

// parseTimeout reads GOFFLOAD_DEVICE_TIMEOUT. It is a Go duration from 10ms
// to maxHelloTimeout (a year, 8760h: the most a hello may say). Or it is 0
// for no timeout; a hung device then hangs its callers. internal/core's
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

// CheckTimeout explains a bad GOFFLOAD_DEVICE_TIMEOUT, or is nil. A kind's
// Open returns it, so Start fails.
func CheckTimeout() error {
	_, err := parseTimeout(os.Getenv(envTimeout))
	return err
}

// timing returns a live link's heartbeat interval and timeout. The timeout is
// GOFFLOAD_DEVICE_TIMEOUT, read when the link goes live. The link pings at
// least four times per timeout, and at least every second.
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
// other. other is its device timeout, from its hello; 0 is none, -1 unknown.
// The heartbeat is also at least four times per other. So a side with a
// shorter timeout than this one's hears from an idle link in time, whatever
// this side's own GOFFLOAD_DEVICE_TIMEOUT says. Take a host started with
// 500ms beside a tcp:// device started with the default (a ping a second). It
// would otherwise find the idle device silent and lose it.
func timingFor(other time.Duration) (interval, timeout time.Duration) {
	interval, timeout = timing()
	if other > 0 && other/4 < interval {
		interval = max(other/4, 2*time.Millisecond)
	}
	return interval, timeout
}

// DeviceTimeout is how long a live link may stay silent before the process at
// its other end counts as lost. It is GOFFLOAD_DEVICE_TIMEOUT; 0 is never.
func DeviceTimeout() time.Duration {
	_, timeout := timing()
	return timeout
}
