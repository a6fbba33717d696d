package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
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

// The device side runs to completion. The goroutine that reads a frame does
// the work it asks for when that work is short and its queue is idle. Such
// work is a launch, a small copy, a record or a sync mark. It writes the
// answer itself (link.sendSoon). So a synchronous launch crosses no goroutine
// hand-off in the device process.
//
// A kernel may run long, though, and while the reader runs it nothing else is
// read. Other queues' frames, peers' notices and the host's pings would wait
// behind it. So a reader that runs work arms a standby timer first. If the
// work is still running when it fires, a new goroutine takes the reader's
// role over. The old one, once its work is done, ends instead of reading
// again.

// standbyAfter is how long a reader may run work before another goroutine
// takes over reading. Tests shorten it (GOFFLOAD_TEST_STANDBY, a duration),
// so that every kernel a reader runs is taken over.
var standbyAfter = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("GOFFLOAD_TEST_STANDBY")); err == nil && d > 0 {
		return d
	}
	return 200 * time.Microsecond
}()

// readerRole is the reader's role of a link's one reading side. It says which
// goroutine holds it (by generation). It says whether that goroutine is
// running work instead of reading.
type readerRole struct {
	mu    sync.Mutex
	gen   uint64      // bumped when a standby takes the role over
	busy  bool        // the holder runs work (see run)
	t     *time.Timer // fires takeOver; stopped while the holder reads
	start func(gen uint64)
}

// init makes the role's timer. start(gen) starts a new holder of generation
// gen, on a goroutine of its own.
func (r *readerRole) init(start func(gen uint64)) {
	r.start = start
	r.t = time.AfterFunc(time.Hour, r.takeOver)
	r.t.Stop()
}

// arm starts the standby timer: the holder is about to run work. It has
// already put the work in its queue's order. So a standby that takes over
// then reads later frames, whose operations go behind it.
func (r *readerRole) arm() {
	r.mu.Lock()
	r.busy = true
	r.t.Reset(standbyAfter)
	r.mu.Unlock()
}

// disarm stops the standby timer once the work that arm announced is done.
// The goroutine of generation gen, which armed it, calls it. If a standby
// took over meanwhile, it leaves the timer to the new holder.
func (r *readerRole) disarm(gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen == gen {
		r.busy = false
		r.t.Stop()
	}
}

// holds reports whether generation gen still holds the role.
func (r *readerRole) holds(gen uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen == gen
}

// takeOver gives the role to a new goroutine if the holder is running work. A
// timer that fires late, after the work, does nothing.
func (r *readerRole) takeOver() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.busy {
		return
	}
	r.busy = false
	r.gen++
	go r.start(r.gen)
}

// exited gives the role to a new goroutine, unless a standby took over
// already. The holder of generation gen ends: a kernel it ran called
// runtime.Goexit.
func (r *readerRole) exited(gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen != gen {
		return
	}
	r.busy = false
	r.t.Stop()
	r.gen++
	go r.start(r.gen)
}

// stop stops the timer for good.
func (r *readerRole) stop() {
	r.mu.Lock()
	r.busy = false
	r.t.Stop()
	r.mu.Unlock()
}

// hello greets the device process and checks that it runs our code.
func (d *Device) hello(img *plugin.Image, num int) error {
	// The heartbeat starts after hello. Until then, the device timeout bounds
	// the wait for the device's hello. (A process may stop or hang before it
	// serves. A tcp:// device may prove the secret and say nothing.)
	_, timeout := timing()
	if timeout > 0 {
		timeout = max(timeout, d.Startup)
	}
	stop := d.l.within(timeout, "hello from the device")
	defer stop()
	if err := d.l.send(&proto.Hello{Num: uint32(max(num, 0)), Status: proto.Status{Text: helloText(img)}}); err != nil {
		return d.l.readErr(err)
	}
	m, err := d.l.r.ReadMsg()
	stop()
	if err != nil {
		return fmt.Errorf("reading the device's hello: %w", d.l.readErr(err))
	}
	if m.Type != proto.THello {
		return fmt.Errorf("%w: want hello, got %s", proto.ErrFrame, m.Type)
	}
	f, err := proto.As[proto.Hello](m)
	if err != nil {
		return err
	}
	if err := f.Status.Err(); err != nil {
		return fmt.Errorf("the device refused the host: %w", err)
	}
	h, err := parseHello(f.Text)
	if err != nil {
		return err
	}
	if err := checkImage(h, img, "host"); err != nil {
		d.l.send(&proto.Exit{})
		return err
	}
	d.count = h.count
	d.mu.Lock()
	d.reading = true
	d.mu.Unlock()
	d.l.live(timingFor(h.timeout))
	go d.read()
	return nil
}

// Serve picks device index of those the device process serves, before Load.
// It returns how many it serves and the one picked (its kind and name).
// Without it, a proxying process serves its first device.
func (d *Device) Serve(index int) (count int, name string, err error) {
	count, text, err := d.serve(index)
	if err != nil || text == "Go CPU device" {
		return count, text, err
	}
	var v struct {
		Name           string
		Token, Process uint64
	}
	if err := json.Unmarshal([]byte(text), &v); err != nil {
		return 0, "", fmt.Errorf("%s: %w: serve: %v", d.name(), proto.ErrFrame, err)
	}
	d.token, d.process = v.Token, v.Process
	return count, v.Name, nil
}

// Process is the device process's number (0 for one that serves its CPUs).
// Sessions with one process of the same number are siblings.
func (d *Device) Process() uint64 { return d.process }

// Sibling tells d that o is served by the same device process. The two link
// inside it (a Sibling frame to d). Both are loaded.
func (d *Device) Sibling(o *Device) error {
	if d.process == 0 || d.process != o.process {
		return fmt.Errorf("%w: devices %d and %d are not served by one process", plugin.ErrUnsupported, d.num, o.num)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.st.Alive(); err != nil {
		return err
	}
	if err := d.l.send(&proto.Sibling{Peer: uint32(o.num), Token: o.token}); err != nil {
		return d.linkLost(err)
	}
	return nil
}

func (d *Device) serve(index int) (count int, text string, err error) {
	_, timeout := timing()
	if timeout > 0 {
		timeout = max(timeout, d.Startup)
	}
	stop := d.l.within(timeout, "answer to serve from the device")
	defer stop()
	if err := d.l.send(&proto.Serve{Req: 1, Index: uint32(index)}); err != nil {
		return 0, "", fmt.Errorf("%s: %w", d.name(), d.l.readErr(err))
	}
	m, err := d.l.r.ReadMsg()
	if err != nil {
		return 0, "", fmt.Errorf("%s: reading the answer to serve: %w", d.name(), d.l.readErr(err))
	}
	r, err := proto.As[proto.Reply](m)
	if err != nil {
		return 0, "", fmt.Errorf("%s: %w", d.name(), err)
	}
	if err := r.Status.Err(); err != nil {
		return int(r.Value), "", fmt.Errorf("%s: %w", d.name(), err)
	}
	return int(r.Value), r.Status.Text, nil
}
