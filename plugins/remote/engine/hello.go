package engine

import (
	"fmt"
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
	// timeout is the sender's device timeout (GOFFLOAD_DEVICE_TIMEOUT: how
	// long it lets the link stay silent; 0 for none), or -1 where its
	// hello does not say: this side pings often enough for it (timingFor).
	timeout time.Duration
}

// helloText is this process's hello: the magic, the protocol version, the
// kernel table's digest and size, and the device timeout in microseconds.
func helloText(img *plugin.Image) string {
	_, timeout := timing()
	return fmt.Sprintf("%s %d %s %d %d", proto.Magic, proto.Version, img.Digest, len(img.Kernels), timeout.Microseconds())
}

func parseHello(s string) (hello, error) {
	f := strings.Fields(s)
	if (len(f) != 4 && len(f) != 5) || f[0] != proto.Magic {
		return hello{}, fmt.Errorf("%w: not a goffload hello: %.40q", proto.ErrFrame, s)
	}
	v, err1 := strconv.Atoi(f[1])
	n, err2 := strconv.Atoi(f[3])
	if err1 != nil || err2 != nil || n < 0 || len(f[2]) != 16 {
		return hello{}, fmt.Errorf("%w: malformed hello %.60q", proto.ErrFrame, s)
	}
	h := hello{version: v, digest: f[2], count: n, timeout: -1}
	if len(f) == 5 {
		us, err := strconv.ParseInt(f[4], 10, 64)
		if err != nil || us < 0 || us > int64(maxHelloTimeout/time.Microsecond) {
			return hello{}, fmt.Errorf("%w: malformed hello %.60q: bad device timeout", proto.ErrFrame, s)
		}
		h.timeout = time.Duration(us) * time.Microsecond
	}
	return h, nil
}

// maxHelloTimeout bounds the device timeout a hello may say (a year: any
// more is taken as a malformed hello, not a wish to wait).
const maxHelloTimeout = 365 * 24 * time.Hour

// checkImage compares the peer's hello with our image. Both sides must run
// the same code: the protocol version must match, and the shorter kernel
// table must be a prefix of the longer one (a host may register kernels its
// device processes have not, and cannot launch those remotely). The side
// with the longer table does the check.
func checkImage(peer hello, img *plugin.Image, self string) error {
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
	return nil
}

// ErrMismatch is wrapped when a host and a device process run different code
// (kernel tables or protocol versions differ); they are refused at hello.
var ErrMismatch = proto.ErrMismatch
