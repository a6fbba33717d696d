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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goffload/offload/internal/waitpoll"
	"github.com/goffload/offload/internal/workpool"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/shm"
	"github.com/goffload/offload/plugins/remote/stream"
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
		Help:          "local[:N]  N device processes of this program on this machine (default 1)",
		ServeIfDevice: ServeIfDevice,
		Serving:       Serving,
	})
}

func openLocal(arg string) ([]plugin.Device, error) {
	if err := timeoutErr(); err != nil {
		return nil, fmt.Errorf("%w: %w", plugin.ErrBadSpec, err)
	}
	n := 1
	if arg != "" {
		v, err := strconv.Atoi(arg)
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
	for i := 0; i < n; i++ {
		d, err := spawn(exe, cores, crowded)
		if err != nil {
			for _, d := range devs {
				d.Close()
			}
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// localProcs counts the local device processes of this process that run,
// for the count of the program's processes on the machine.
var localProcs atomic.Int64

// procsChanged follows a device process's start (+1) or end (-1): the
// host is crowded while it and its devices outnumber the cores.
func procsChanged(delta int64) {
	waitpoll.SetCrowded(int(localProcs.Add(delta))+1 > runtime.NumCPU())
}

// spawn starts a device process of exe connected by an inherited socket.
func spawn(exe, cores string, crowded bool) (*device, error) {
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
	cmd.Env = append(os.Environ(), envRole+"=device", envFD+"=3", envSide+"=4", envCores+"="+cores)
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
	var l *link
	if shmFile != nil {
		if l, err = newShmLink(int(shmFile.Fd()), 0, conn, "the device process ended (its socket closed)"); err != nil {
			cmd.Process.Kill()
			conn.Close()
			side.Close()
			<-exited
			return nil, err
		}
	} else {
		l = newLink(conn)
	}
	d := newDevice(l, "local", fmt.Sprintf("local device (pid %d)", pid))
	d.setNum = func(n int) { num.Store(int64(n)) }
	d.startup = processStartup
	d.side = side
	d.onLost = func(cause error) error {
		if errors.Is(cause, ErrSilent) {
			// Hung or stopped: it will not exit by itself (a stopped
			// process not even when sent SIGTERM), and a lost device is
			// never used again, so it is killed now rather than waited
			// for, as closeFn would kill it at Stop.
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
	d.kill = func() { cmd.Process.Kill() }
	d.closeFn = func(lost bool) error {
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

// forkReqs takes the device processes to start to the forker, whose
// thread forks them all (startOnForker).
var (
	forkOnce sync.Once
	forkReqs chan forkReq
)

type forkReq struct {
	cmd  *exec.Cmd
	done chan error
}

// startOnForker starts cmd from the forker: a goroutine locked to a thread
// of its own that never returns, so the thread lives as long as the
// process. Linux sends a child its Pdeathsig when the thread that forked it
// ends, not the process: Go ends a thread whenever a goroutine that locked
// it returns without unlocking, and a device forked by such a caller's
// thread (or by any thread Go retires) died with it.
func startOnForker(cmd *exec.Cmd) error {
	forkOnce.Do(func() {
		forkReqs = make(chan forkReq)
		go forker()
	})
	done := make(chan error, 1)
	forkReqs <- forkReq{cmd, done}
	return <-done
}

// forker starts the commands it is sent, on its own locked thread, for the
// life of the process.
func forker() {
	runtime.LockOSThread() // never unlocked: the thread is the devices' parent
	for r := range forkReqs {
		r.done <- r.cmd.Start()
	}
}

// unixPair returns a connected pair of Unix sockets: ours as a UnixConn, the
// other as a file to hand to a child.
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

// newShmLink starts a link over the shared memory of file fd, as side, with
// bell its doorbell (shm.New).
func newShmLink(fd, side int, bell net.Conn, endWhat string) (*link, error) {
	t, err := shm.New(fd, side, bell, endWhat)
	if err != nil {
		return nil, err
	}
	return startLink(t), nil
}
