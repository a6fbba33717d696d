package remote

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/hostmem"
	"github.com/goffload/offload/plugins/remote/engine"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/stream"
)

// Environment of TCP devices.
const (
	envPlain  = "GOFFLOAD_TCP_PLAIN"     // "1": sessions in the clear (both sides)
	envListen = "GOFFLOAD_LISTEN"        // address a device process serves hosts on
	envMemory = "GOFFLOAD_DEVICE_MEMORY" // bytes a TCP device's hosts may hold together
	envSecret = "GOFFLOAD_SECRET"        // shared secret of hosts and TCP devices
)

// ErrAuth is wrapped when a host and a TCP device do not share the secret.
var ErrAuth = proto.ErrAuth

func init() {
	plugin.RegisterKind(plugin.Kind{
		Name:  "tcp",
		Open:  openTCP,
		Order: 60,
		Help:  "tcp://HOST:PORT  a device process serving on HOST:PORT (GOFFLOAD_ROLE=device GOFFLOAD_LISTEN=…), with GOFFLOAD_SECRET on both sides; TLS 1.3 unless GOFFLOAD_TCP_PLAIN=1 on both; a device for each it serves (its GOFFLOAD_DEVICES, else its CPUs)",
	})
}

// configError is an error of a device item that is well formed but cannot be
// used as the environment stands (a missing secret). It wraps
// plugin.ErrBadSpec, so that Start fails with a configuration error. It says
// only what is wrong.
type configError string

func (e configError) Error() string { return string(e) }
func (e configError) Unwrap() error { return plugin.ErrBadSpec }

// hostHandshakeTimeout bounds a host's whole handshake with a TCP device.
var hostHandshakeTimeout = 10 * time.Second

func openTCP(addr string) ([]plugin.Device, error) {
	if err := checkTCPAddr(addr); err != nil {
		return nil, err
	}
	secret := os.Getenv(envSecret)
	if secret == "" {
		return nil, configError(fmt.Sprintf("tcp://%s: the shared secret is missing: set %s in this program's environment to the secret the device process was started with (GOFFLOAD_ROLE=device GOFFLOAD_LISTEN=HOST:PORT %s=… on the device's machine); TCP devices serve only hosts that prove it", addr, envSecret, envSecret))
	}
	sec, err := stream.SecurityFromEnv(secret)
	if err != nil {
		return nil, configError(fmt.Sprintf("tcp://%s: %v", addr, err))
	}
	if err := engine.CheckTimeout(); err != nil {
		return nil, fmt.Errorf("%w: %w", plugin.ErrBadSpec, err)
	}
	// One session per device the process serves: the first says how many.
	d, err := dialTCP(addr, sec)
	if err != nil {
		return nil, err
	}
	devs := []plugin.Device{d}
	fail := func(err error) ([]plugin.Device, error) {
		for _, d := range devs {
			d.Close()
		}
		return nil, fmt.Errorf("tcp://%s: %w", addr, err)
	}
	n, _, err := d.Serve(0)
	if err != nil {
		return fail(err)
	}
	d.Intro = siblingsOf(d.Process())
	for i := 1; i < n; i++ {
		d, err := dialTCP(addr, sec)
		if err != nil {
			for _, d := range devs {
				d.Close()
			}
			return nil, err
		}
		devs = append(devs, d)
		if _, _, err := d.Serve(i); err != nil {
			return fail(err)
		}
		d.Intro = siblingsOf(d.Process())
	}
	return devs, nil
}

// dialTCP opens a session with the TCP device at addr. It is the host's side
// of a device it serves, picked with Serve before Load.
func dialTCP(addr string, sec *stream.Security) (*engine.Device, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(hostHandshakeTimeout))
	c, err := sec.HostHandshake(conn, addr)
	if err != nil {
		conn.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("no handshake within %v: %w", hostHandshakeTimeout, err)
		}
		return nil, fmt.Errorf("tcp://%s: %w", addr, err)
	}
	conn.SetDeadline(time.Time{})
	if sec.Plain() {
		plainNotice("tcp://" + addr)
	}
	d := engine.NewDevice(stream.Session(c), "tcp", "tcp device tcp://"+addr)
	d.Addr = "tcp://" + addr
	d.CloseFn = func(bool) error { return nil }
	return d, nil
}

// checkTCPAddr checks a tcp:// item's HOST:PORT. A malformed one is an error
// at Start (plugin.ErrBadSpec). It is not a device that cannot be reached,
// which DEFAULT's policy would replace with the host, silently.
func checkTCPAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: tcp://%s: want tcp://HOST:PORT: %v", plugin.ErrBadSpec, addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '+' {
		return fmt.Errorf("%w: the port of tcp://%s is %q; want tcp://HOST:PORT with PORT a number from 1 to 65535", plugin.ErrBadSpec, addr, port)
	}
	return nil
}

// plainNotice says on stderr that the session with what goes in the clear, as
// the user asked.
func plainNotice(what string) {
	fmt.Fprintf(os.Stderr, "goffload: %s: plain TCP (%s=1): frames and data go unencrypted and unauthenticated, for a fabric you trust\n", what, envPlain)
}

// Limits of a TCP device on connections whose host has not proved the
// secret yet.
const (
	// maxHandshakes is how many connections a TCP device holds in the
	// handshake at once. maxHandshakesPerSource of them may be from one
	// address. When another arrives, an older one is closed (handshakeSlots).
	// So a flood of connections costs the device at most this many
	// descriptors and goroutines. It evicts only the flooder's own
	// connections while it comes from fewer than
	// maxHandshakes/maxHandshakesPerSource addresses.
	maxHandshakes = 64
	// maxHandshakesPerSource is how many of the device's handshake slots
	// one source address may hold at once.
	maxHandshakesPerSource = 8
	// handshakeTimeout bounds a whole handshake, however the host sends:
	// nothing, or a byte at a time.
	handshakeTimeout = 5 * time.Second
	// Accept errors other than a closed listener (out of descriptors, a
	// connection aborted) are retried after a pause. The pause doubles from
	// acceptBackoffMin up to acceptBackoffMax, as net/http does.
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// tcpServer serves hosts on a listener.
type tcpServer struct {
	ln    net.Listener
	sec   *stream.Security
	img   *plugin.Image
	cores int

	timeout time.Duration
	log     *rateLog
	guesses *stream.GuessLimiter // failed proofs per source address

	budget *hostmem.Budget // every session's memory together (GOFFLOAD_DEVICE_MEMORY)
	serves engine.Opener   // the devices the process serves (GOFFLOAD_DEVICES), nil for its CPUs

	mu      sync.Mutex
	slots   *handshakeSlots // under mu
	evicted int             // handshakes closed to make room, in all
}

func newTCPServer(ln net.Listener, sec *stream.Security, img *plugin.Image, cores int) *tcpServer {
	return &tcpServer{
		ln: ln, sec: sec, img: img, cores: cores,
		timeout: handshakeTimeout,
		budget:  hostmem.NewBudget(hostmem.Limit(), "the machine's memory"),
		log:     &rateLog{w: os.Stderr, every: time.Second, burst: 10},
		guesses: stream.NewGuessLimiter(),
		slots:   newHandshakeSlots(maxHandshakes, maxHandshakesPerSource),
	}
}

// serve accepts connections until the listener is closed or fails for good.
func (s *tcpServer) serve() error {
	var delay time.Duration
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			if !temporary(err) {
				return err
			}
			delay = min(max(2*delay, acceptBackoffMin), acceptBackoffMax)
			s.log.printf("goffload device: accept on %s: %v; retrying in %v", s.ln.Addr(), err, delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		go s.handle(conn, s.admit(conn))
	}
}

// admit enters conn among the handshakes. If there are too many, it closes an
// older one (handshakeSlots): its source's own, if it holds its share.
func (s *tcpServer) admit(conn net.Conn) *list.Element {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, old := s.slots.admit(&handshake{conn: conn, src: stream.Source(conn.RemoteAddr())})
	if old != nil {
		old.conn.Close()
		s.evicted++
		why := fmt.Sprintf("%d hosts in the handshake: closed the oldest connection of the address that holds the most", s.slots.max)
		if old.src == e.Value.(*handshake).src {
			why = fmt.Sprintf("%d connections from %s in the handshake: closed its oldest", s.slots.perSource, old.src)
		}
		s.log.printf("goffload device: %s, from %s (%d closed so far)", why, old.conn.RemoteAddr(), s.evicted)
	}
	return e
}

// leave takes e out of the handshakes. It reports false if e was closed to
// make room.
func (s *tcpServer) leave(e *list.Element) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slots.leave(e)
}

// handshaking is how many connections are in the handshake.
func (s *tcpServer) handshaking() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slots.len()
}

// handle authenticates the host on conn and serves it.
func (s *tcpServer) handle(conn net.Conn, e *list.Element) {
	conn.SetDeadline(time.Now().Add(s.timeout))
	src := stream.Source(conn.RemoteAddr())
	c, err := s.sec.DeviceHandshake(conn, s.guesses, src)
	if !s.leave(e) {
		conn.Close() // admit said why
		return
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("no handshake within %v: %w", s.timeout, err)
		}
		s.log.printf("goffload device: refused host %s: %v", conn.RemoteAddr(), err)
		conn.Close()
		return
	}
	s.guesses.Proved(src)
	conn.SetDeadline(time.Time{})
	ss := engine.NewSession(stream.Session(c), s.img, s.cores)
	ss.ShareMemory(s.budget)
	ss.Kind = "tcp"
	ss.Serves = s.serves
	ss.PairLinks = pairLinks
	ss.HelloLimit = engine.DeviceTimeout()
	if err := ss.Serve(); err != nil && err != engine.ErrSessionOver {
		fmt.Fprintf(os.Stderr, "goffload device: session with %s: %v\n", conn.RemoteAddr(), err)
	}
}

// temporary reports whether an accept error may go away. Anything but a
// closed listener, or a descriptor that is no listening socket, may.
func temporary(err error) bool {
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.EBADF, syscall.EINVAL, syscall.ENOTSOCK, syscall.EOPNOTSUPP, syscall.EFAULT:
			return false
		}
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// rateLog writes lines, at most burst of them every interval. It counts the
// lines it drops and says so in the next line it writes.
type rateLog struct {
	w     io.Writer
	every time.Duration
	burst int

	mu      sync.Mutex
	start   time.Time // of the interval
	n       int       // lines written in it
	dropped int
}

func (r *rateLog) printf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.start) >= r.every {
		r.start, r.n = now, 0
	}
	if r.n >= r.burst {
		r.dropped++
		return
	}
	r.n++
	line := fmt.Sprintf(format, args...)
	if r.dropped > 0 {
		line += fmt.Sprintf(" (and %d lines like these dropped)", r.dropped)
		r.dropped = 0
	}
	fmt.Fprintln(r.w, line)
}

// handshakeSlots are a TCP device's connections whose hosts have not proved
// the secret yet. At most max are held at once, at most perSource of them
// from one source address. A connection beyond either bound closes an older
// one. That is its own source's oldest if that source holds perSource. Else
// it is the oldest of the source that holds the most. So a party that opens
// connections faster than a handshake ends evicts only its own. Other sources
// keep theirs. It is plain state: the caller closes what it evicts.
type handshakeSlots struct {
	max, perSource int
	all            list.List // of *handshake, oldest first
	bySrc          map[string]int
}

// handshake is a connection whose host has not proved the secret yet.
type handshake struct {
	conn    net.Conn
	src     string
	evicted bool // closed to make room for a newer one
}

func newHandshakeSlots(max, perSource int) *handshakeSlots {
	return &handshakeSlots{max: max, perSource: perSource, bySrc: map[string]int{}}
}

// admit enters h and returns the handshake it evicts to make room, if any.
func (s *handshakeSlots) admit(h *handshake) (*list.Element, *handshake) {
	var out *list.Element
	switch {
	case s.bySrc[h.src] >= s.perSource:
		out = s.oldestOf(h.src)
	case s.all.Len() >= s.max:
		most := 0
		for _, n := range s.bySrc {
			most = max(most, n)
		}
		for e := s.all.Front(); e != nil && out == nil; e = e.Next() {
			if s.bySrc[e.Value.(*handshake).src] == most {
				out = e // the oldest of the sources that hold the most
			}
		}
	}
	var old *handshake
	if out != nil {
		old = out.Value.(*handshake)
		old.evicted = true
		s.remove(out)
	}
	s.bySrc[h.src]++
	return s.all.PushBack(h), old
}

// leave takes e out; it reports false if e was evicted.
func (s *handshakeSlots) leave(e *list.Element) bool {
	if e.Value.(*handshake).evicted {
		return false
	}
	s.remove(e)
	return true
}

func (s *handshakeSlots) remove(e *list.Element) {
	h := s.all.Remove(e).(*handshake)
	if s.bySrc[h.src]--; s.bySrc[h.src] == 0 {
		delete(s.bySrc, h.src)
	}
}

func (s *handshakeSlots) oldestOf(src string) *list.Element {
	for e := s.all.Front(); e != nil; e = e.Next() {
		if e.Value.(*handshake).src == src {
			return e
		}
	}
	return nil
}

// len is how many connections are in the handshake.
func (s *handshakeSlots) len() int { return s.all.Len() }

// serveTCPOn serves hosts on ln as newTCPServer's server does. The device's
// memory for all its hosts together is bounded by GOFFLOAD_DEVICE_MEMORY (the
// machine's memory if unset).
func serveTCPOn(ln net.Listener, sec *stream.Security, img *plugin.Image, cores int) error {
	srv := newTCPServer(ln, sec, img, cores)
	var err error
	if srv.serves, err = servedOpener(os.Getenv(envServe), false); err != nil {
		ln.Close()
		return err
	}
	dev := fmt.Sprintf("tcp device on %s, pid %d", ln.Addr(), os.Getpid())
	srv.budget = hostmem.NewBudget(hostmem.Limit(), "the machine's memory; "+dev)
	if v, ok := os.LookupEnv(envMemory); ok {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n <= 0 || n > hostmem.Limit() {
			ln.Close()
			return fmt.Errorf("%s=%q: want the bytes of memory the device's hosts may hold together, from 1 to %d (this machine's memory)", envMemory, v, hostmem.Limit())
		}
		srv.budget = hostmem.NewBudget(n, fmt.Sprintf("%s=%d; %s", envMemory, n, dev))
	}
	return srv.serve()
}
