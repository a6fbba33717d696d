package remote

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goffload/offload/internal/waitpoll"
	"github.com/goffload/offload/internal/workpool"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/engine"
	"github.com/goffload/offload/plugins/remote/shm"
	"github.com/goffload/offload/plugins/remote/stream"
	"github.com/goffload/offload/plugins/remote/transport"
)

// Environment of a device process, set by the host that starts it.
const (
	envRole  = "GOFFLOAD_ROLE"         // "device"
	envFD    = "GOFFLOAD_FD"           // inherited socket to the host
	envSide  = "GOFFLOAD_SIDE_FD"      // inherited socket the host introduces peers on
	envCores = "GOFFLOAD_DEVICE_CORES" // cores the device splits loops over
	envShm   = "GOFFLOAD_SHM_FD"       // inherited memory file of a shared-memory link
	envCrowd = "GOFFLOAD_CROWDED"      // "1": more of the program's processes than cores (waitpoll.SetCrowded)
	envLink  = "GOFFLOAD_LOCAL_LINK"   // shm (the default) or socket: what a local device's link goes through
)

// localLink is what local devices' links go through: "shm" (shared memory,
// the default) or "socket" (GOFFLOAD_LOCAL_LINK=socket). Start checks the
// value (internal/core's CheckDeviceEnv).
func localLink() string {
	if os.Getenv(envLink) == "socket" {
		return "socket"
	}
	return "shm"
}

func init() {
	// The package's process hooks (serving as a device process, a TCP
	// device or an MPI rank) go with this kind: one set for the package.
	plugin.RegisterKind(plugin.Kind{
		Name:          "local",
		Open:          openLocal,
		Order:         50,
		Help:          "local[:N]  N device processes of this program on this machine (default 1); local:N[KIND] has each serve a device of KIND (local:2[opencl]) instead of its CPUs",
		ServeIfDevice: ServeIfDevice,
		Serving:       Serving,
	})
}

func openLocal(arg string) ([]plugin.Device, error) {
	if err := engine.CheckTimeout(); err != nil {
		return nil, fmt.Errorf("%w: %w", plugin.ErrBadSpec, err)
	}
	count, served, err := splitServed("local", arg)
	if err != nil {
		return nil, err
	}
	n := 1
	if count != "" {
		v, err := strconv.Atoi(count)
		if err != nil || v < 1 || v > 256 {
			return nil, fmt.Errorf("%w: local:%s: want local:N with N a process count from 1 to 256", plugin.ErrBadSpec, arg)
		}
		n = v
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find this program's executable to start devices: %w", err)
	}
	cores := os.Getenv(envCores)
	if cores == "" {
		cores = strconv.Itoa(max(1, runtime.NumCPU()/n))
	} else if _, err := workpool.ParseWorkers(envCores, cores); err != nil {
		return nil, fmt.Errorf("%w: %w", plugin.ErrBadSpec, err)
	}
	// The host and its local devices: more processes than cores make
	// every poller of them yield its core now and then (waitpoll.Pause).
	crowded := int(localProcs.Load())+n+1 > runtime.NumCPU()
	if crowded {
		waitpoll.SetCrowded(true)
	}
	var devs []plugin.Device
	fail := func(err error) ([]plugin.Device, error) {
		for _, d := range devs {
			d.Close()
		}
		return nil, err
	}
	for i := 0; i < n; i++ {
		d, err := spawn(exe, cores, crowded, served)
		if err != nil {
			return fail(err)
		}
		devs = append(devs, d)
	}
	// Process i serves device i (modulo how many the process has) of
	// those served names: one process per GPU, or several on one device.
	for i, d := range devs {
		if served == "" {
			break
		}
		if _, _, err := d.(*engine.Device).Serve(i); err != nil {
			return fail(fmt.Errorf("local:%s: %w", arg, err))
		}
	}
	return devs, nil
}

// localProcs counts the local device processes of this process that run. It
// is for the count of the program's processes on the machine.
var localProcs atomic.Int64

// procsChanged follows a device process's start (+1) or end (-1). The host is
// crowded while it and its devices outnumber the cores.
func procsChanged(delta int64) {
	waitpoll.SetCrowded(int(localProcs.Add(delta))+1 > runtime.NumCPU())
}

// spawn starts a device process of exe connected by an inherited socket.
// The process serves served's devices (GOFFLOAD_DEVICES items), or its
// CPUs if served is empty.
func spawn(exe, cores string, crowded bool, served string) (*engine.Device, error) {
	fds, err := stream.SocketPair()
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	parent := os.NewFile(uintptr(fds[0]), "goffload-host")
	child := os.NewFile(uintptr(fds[1]), "goffload-device")
	defer child.Close()
	conn, err := net.FileConn(parent)
	parent.Close()
	if err != nil {
		return nil, err
	}
	side, sideChild, err := unixPair()
	if err != nil {
		conn.Close()
		return nil, err
	}
	defer sideChild.Close()
	var shmFile *os.File
	if localLink() == "shm" {
		// Where memfd_create is refused (an old kernel, a seccomp filter),
		// the device's link stays on the socket.
		if shmFile, err = shm.NewFile(); err == nil {
			defer shmFile.Close()
		}
	}
	num := &atomic.Int64{}
	num.Store(-1)
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), envRole+"=device", envFD+"=3", envSide+"=4", envCores+"="+cores, envServe+"="+served)
	if crowded {
		cmd.Env = append(cmd.Env, envCrowd+"=1")
	}
	if _, set := os.LookupEnv("GORACE"); !set {
		// A device process built with -race would sleep a second at exit.
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0")
	}
	cmd.ExtraFiles = []*os.File{child, sideChild}
	if shmFile != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, shmFile)
		cmd.Env = append(cmd.Env, envShm+"=5")
	}
	// The device dies with the host, also when the host is killed: with
	// the process, as the forker thread lives as long (startOnForker).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdout = &prefixWriter{w: os.Stdout, num: num}
	cmd.Stderr = &prefixWriter{w: os.Stderr, num: num}
	if err := startOnForker(cmd); err != nil {
		conn.Close()
		side.Close()
		return nil, fmt.Errorf("starting a device process: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	var waitErr error
	procsChanged(+1)
	go func() {
		waitErr = cmd.Wait()
		procsChanged(-1)
		close(exited)
	}()
	var t transport.Transport
	if shmFile != nil {
		if t, err = shm.New(int(shmFile.Fd()), 0, conn, "the device process ended (its socket closed)"); err != nil {
			cmd.Process.Kill()
			conn.Close()
			side.Close()
			<-exited
			return nil, err
		}
	} else {
		t = stream.New(conn)
	}
	d := engine.NewDevice(t, "local", fmt.Sprintf("local device (pid %d)", pid))
	d.SetNum = func(n int) { num.Store(int64(n)) }
	d.Startup = engine.ProcessStartup
	d.Intro = localPeers
	localPeers.add(d, side)
	d.OnLost = func(cause error) error {
		if errors.Is(cause, ErrSilent) {
			// Hung or stopped: it will not exit by itself. (A stopped process
			// does not even when sent SIGTERM.) A lost device is never used
			// again. So it is killed now rather than waited for, as closeFn
			// would kill it at Stop.
			cmd.Process.Kill()
			return fmt.Errorf("device process %d (killed): %v", pid, cause)
		}
		select {
		case <-exited:
		case <-time.After(time.Second):
			return fmt.Errorf("device process %d: %v", pid, cause)
		}
		if waitErr == nil {
			return fmt.Errorf("device process %d exited (%v)", pid, cause)
		}
		return fmt.Errorf("device process %d: %v (%v)", pid, waitErr, cause)
	}
	d.Killer = func() { cmd.Process.Kill() }
	d.CloseFn = func(lost bool) error {
		side.Close()
		if lost { // it may be hung: it had its chance
			cmd.Process.Kill()
			<-exited
			return nil
		}
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-exited
			return fmt.Errorf("device process %d did not exit; killed it", pid)
		}
		var ee *exec.ExitError
		if waitErr != nil && !errors.As(waitErr, &ee) {
			return waitErr
		}
		if ee != nil {
			return fmt.Errorf("device process %d: %v", pid, ee)
		}
		return nil
	}
	return d, nil
}

// forkReqs takes the device processes to start to the forker. Its thread
// forks them all (startOnForker).
var (
	forkOnce sync.Once
	forkReqs chan forkReq
)

type forkReq struct {
	cmd  *exec.Cmd
	done chan error
}

// startOnForker starts cmd from the forker. The forker is a goroutine locked
// to a thread of its own that never returns, so the thread lives as long as
// the process. Linux sends a child its Pdeathsig when the thread that forked
// it ends, not the process. Go ends a thread whenever a goroutine that locked
// it returns without unlocking. A device forked by such a caller's thread (or
// by any thread Go retires) died with it.
func startOnForker(cmd *exec.Cmd) error {
	forkOnce.Do(func() {
		forkReqs = make(chan forkReq)
		go forker()
	})
	done := make(chan error, 1)
	forkReqs <- forkReq{cmd, done}
	return <-done
}

// forker starts the commands it is sent, on its own locked thread. It runs
// for the life of the process.
func forker() {
	runtime.LockOSThread() // never unlocked: the thread is the devices' parent
	for r := range forkReqs {
		r.done <- r.cmd.Start()
	}
}

// unixPair returns a connected pair of Unix sockets. Ours is a UnixConn; the
// other is a file to hand to a child.
func unixPair() (*net.UnixConn, *os.File, error) {
	fds, err := stream.SocketPair()
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	f := os.NewFile(uintptr(fds[0]), "goffload-side")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		syscall.Close(fds[1])
		return nil, nil, err
	}
	return c.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "goffload-side-device"), nil
}

// prefixWriter writes whole lines, each prefixed with the device number.
type prefixWriter struct {
	w   io.Writer
	num *atomic.Int64
	mu  sync.Mutex
	buf []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.emit(p.buf[:i+1])
		p.buf = p.buf[i+1:]
	}
	if len(p.buf) > 64<<10 { // a very long line: pass it on in pieces
		p.emit(append(p.buf, '\n'))
		p.buf = nil
	}
	return len(b), nil
}

func (p *prefixWriter) emit(line []byte) {
	prefix := "[device ?] "
	if n := p.num.Load(); n >= 0 {
		prefix = "[device " + strconv.FormatInt(n, 10) + "] "
	}
	p.w.Write(append([]byte(prefix), line...))
}

// Device-to-device transfers go straight between the two device processes
// (the engine's peers). The host only introduces local devices. It makes a
// socket pair, and a memory file for a shared-memory link. It hands one end
// to each device over its side channel, a Unix socket that carries
// descriptors. MPI ranks reach each other themselves (mpi.go).

// localPeers introduces this process's local devices to each other
// (engine.Introducer). It is the host's record of their side channels, and of
// which it has introduced to each other.
var localPeers = &localIntro{sides: map[*engine.Device]*net.UnixConn{}, done: map[[2]*engine.Device]bool{}}

type localIntro struct {
	sync.Mutex
	sides map[*engine.Device]*net.UnixConn // the channel each device is introduced to others on
	done  map[[2]*engine.Device]bool
}

// add enters d, whose side channel is side.
func (li *localIntro) add(d *engine.Device, side *net.UnixConn) {
	li.Lock()
	defer li.Unlock()
	li.sides[d] = side
}

// Introduce hands a and b the two ends of a new socket pair, once.
func (li *localIntro) Introduce(a, b *engine.Device) error {
	key := [2]*engine.Device{a, b}
	if a.Num() > b.Num() {
		key = [2]*engine.Device{b, a}
	}
	li.Lock()
	defer li.Unlock()
	if li.done[key] {
		return nil
	}
	sa, sb := li.sides[a], li.sides[b]
	if sa == nil || sb == nil {
		return fmt.Errorf("%w: devices %d and %d are not both processes of this machine", plugin.ErrUnsupported, a.Num(), b.Num())
	}
	fds, err := stream.SocketPair()
	if err != nil {
		return err
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	// Two local devices link through shared memory, as each does with the
	// host. The socket only tells each of the other's end. A memory file
	// refused leaves them on the socket.
	introA, introB := fmt.Sprintf("peer %d", b.Num()), fmt.Sprintf("peer %d", a.Num())
	rightsA, rightsB := syscall.UnixRights(fds[0]), syscall.UnixRights(fds[1])
	if localLink() == "shm" {
		if f, err := shm.NewFile(); err == nil {
			defer f.Close()
			introA, introB = introA+" shm 0", introB+" shm 1"
			rightsA, rightsB = syscall.UnixRights(fds[0], int(f.Fd())), syscall.UnixRights(fds[1], int(f.Fd()))
		}
	}
	if _, _, err := sa.WriteMsgUnix([]byte(introA), rightsA, nil); err != nil {
		return introErr(a, b, err)
	}
	if _, _, err := sb.WriteMsgUnix([]byte(introB), rightsB, nil); err != nil {
		return introErr(b, a, err)
	}
	li.done[key] = true
	return nil
}

// introErr is the error of introducing b to a, whose side channel refused the
// introduction with err. Where the channel broke, a's process is gone. The
// error is then ErrDeviceLost, naming a, which its link says soon too.
func introErr(a, b *engine.Device, err error) error {
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("introducing device %d to %d: %w: device %d's process is gone: %w", b.Num(), a.Num(), plugin.ErrDeviceLost, a.Num(), err)
	}
	return fmt.Errorf("introducing device %d to %d: %w", b.Num(), a.Num(), err)
}

// Forget drops d's introductions and its side channel: d closed.
func (li *localIntro) Forget(d *engine.Device) {
	li.Lock()
	defer li.Unlock()
	delete(li.sides, d)
	for k := range li.done {
		if k[0] == d || k[1] == d {
			delete(li.done, k)
		}
	}
}

// receivePeers reads the host's introductions for session s from its side
// channel until it closes. It links s to each peer introduced.
func receivePeers(s *engine.Session, ch *net.UnixConn) {
	defer ch.Close()
	buf, oob := make([]byte, 64), make([]byte, syscall.CmsgSpace(8))
	for {
		n, oobn, _, _, err := ch.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		in, err := parseIntro(buf[:n], oob[:oobn])
		if err != nil {
			fmt.Fprintf(os.Stderr, "goffload device %d: bad introduction: %v\n", s.Num(), err)
			continue
		}
		f := os.NewFile(uintptr(in.fd), "goffload-peer")
		conn, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if in.shm >= 0 {
				syscall.Close(in.shmFD)
			}
			continue
		}
		if in.shm < 0 {
			s.AddPeer(in.num, stream.New(conn))
			continue
		}
		t, err := shm.New(in.shmFD, in.shm, conn, fmt.Sprintf("device %d's process ended (its socket closed)", in.num))
		syscall.Close(in.shmFD)
		if err != nil {
			fmt.Fprintf(os.Stderr, "goffload device %d: link to device %d: %v\n", s.Num(), in.num, err)
			conn.Close()
			continue
		}
		s.AddPeer(in.num, t)
	}
}

// intro is the host's introduction of a peer. "peer N" comes with a socket.
// "peer N shm S" comes with a socket and the memory file of a shared-memory
// link, of which this device is side S.
type intro struct {
	fd, num int
	shm     int // the side, or -1 for a link on the socket
	shmFD   int
}

func parseIntro(b, oob []byte) (intro, error) {
	bad := intro{fd: -1, shm: -1, shmFD: -1}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		return bad, fmt.Errorf("no descriptor")
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) < 1 || len(fds) > 2 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return bad, fmt.Errorf("no descriptor")
	}
	fail := func() (intro, error) {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return bad, fmt.Errorf("%q", b)
	}
	s, ok := strings.CutPrefix(string(b), "peer ")
	if !ok {
		return fail()
	}
	in := intro{fd: fds[0], shm: -1, shmFD: -1}
	if num, side, shm := strings.Cut(s, " shm "); shm {
		if len(fds) != 2 || (side != "0" && side != "1") {
			return fail()
		}
		s, in.shm, in.shmFD = num, int(side[0]-'0'), fds[1]
	} else if len(fds) != 1 {
		return fail()
	}
	num, err := strconv.Atoi(s)
	if err != nil || num < 0 {
		return fail()
	}
	in.num = num
	return in, nil
}
