package testbed

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StartTimeout bounds how long StartDevice waits for a device process to
// say where it serves (a -race build on a loaded machine takes a while to
// start).
const StartTimeout = 30 * time.Second

// tailLines is how many of a device process's last output lines are kept
// for messages.
const tailLines = 40

// A Device is a goffload device process serving hosts over TCP on a
// machine's address: a tcp:// device. The bed kills it when it closes.
type Device struct {
	// Spec names the device in GOFFLOAD_DEVICES (offload.WithDevices):
	// tcp://ADDR:PORT.
	Spec string
	// Addr is where it serves, ADDR:PORT.
	Addr string
	// PID is the device process's pid (in this machine's pid namespace:
	// it can be signalled).
	PID int
	// Machine is the machine it runs in.
	Machine *Machine

	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and its output is read
	exit error         // how it exited, set before done closes

	mu   sync.Mutex
	tail []string // its last output lines (stdout and stderr)
	kill sync.Once
}

// StartDevice starts exe with args in the machine as a goffload tcp://
// device: with GOFFLOAD_ROLE=device, GOFFLOAD_LISTEN=ADDR:0 (ADDR the
// machine's address) and GOFFLOAD_SECRET=the bed's Secret, then env (which
// may override them). It returns once the process has said where it serves
// ("serving on ADDR:PORT" on stderr). The process is killed when the bed
// closes, and when this process ends (Pdeathsig, which ip netns exec keeps
// across its exec).
//
// A test binary starts itself (os.Executable) with "-test.run=^$", and
// calls role.ServeDevice at the top of its TestMain, so that the
// process serves instead of running the tests.
func (m *Machine) StartDevice(exe string, args []string, env ...string) (*Device, error) {
	b := m.bed
	cmd := m.Command(exe, args...)
	cmd.Env = append(os.Environ(),
		"GOFFLOAD_ROLE=device",
		"GOFFLOAD_LISTEN="+net.JoinHostPort(m.addr.String(), "0"),
		"GOFFLOAD_SECRET="+b.secret)
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%v: starting a device: %w", m, err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	d := &Device{Machine: m, cmd: cmd, done: make(chan struct{})}

	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("%v: starting a device: the testbed is closed", m)
	}
	err = cmd.Start()
	if err == nil {
		b.devices[d] = struct{}{}
	}
	b.mu.Unlock()
	pw.Close()
	if err != nil {
		pr.Close()
		return nil, fmt.Errorf("%v: starting a device: %w", m, err)
	}
	d.PID = cmd.Process.Pid

	addrs := make(chan string, 1)
	go d.read(pr, addrs)
	timer := time.NewTimer(StartTimeout)
	defer timer.Stop()
	select {
	case a := <-addrs:
		d.Addr = a
		d.Spec = "tcp://" + a
		return d, nil
	case <-d.done:
		d.Kill() // only forgets it: it has exited
		return nil, fmt.Errorf("%v: the device process (pid %d) ended before it said where it serves (%v); its output:\n%s", m, d.PID, d.exit, d.Output())
	case <-timer.C:
		d.Kill()
		return nil, fmt.Errorf("%v: the device process (pid %d) did not say where it serves within %v; its output:\n%s", m, d.PID, StartTimeout, d.Output())
	}
}

// read keeps the process's last lines and hands on the address of its
// first "serving on" line, until the output ends; then it waits for the
// process and closes done.
func (d *Device) read(r *os.File, addrs chan<- string) {
	defer close(d.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 1<<20)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		d.mu.Lock()
		if len(d.tail) == tailLines {
			d.tail = append(d.tail[:0], d.tail[1:]...)
		}
		d.tail = append(d.tail, line)
		d.mu.Unlock()
		if _, a, ok := strings.Cut(line, " serving on "); ok && !sent {
			addrs <- strings.TrimSpace(a)
			sent = true
		}
	}
	io.Copy(io.Discard, r) // a line over 1 MiB ended the scan: drain the rest
	r.Close()
	d.exit = d.cmd.Wait()
}

// Output returns the device process's last lines of output (stdout and
// stderr together).
func (d *Device) Output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.tail, "\n")
}

// Done is closed once the device process has exited.
func (d *Device) Done() <-chan struct{} { return d.done }

// Exit is how the device process exited (a killed one: "signal:
// killed"), once Done is closed; nil before.
func (d *Device) Exit() error {
	select {
	case <-d.done:
		return d.exit
	default:
		return nil
	}
}

// Kill kills the device process (SIGKILL) and waits for it to exit.
func (d *Device) Kill() {
	d.kill.Do(func() {
		d.cmd.Process.Kill()
		<-d.done
		b := d.Machine.bed
		b.mu.Lock()
		delete(b.devices, d)
		b.mu.Unlock()
	})
	<-d.done
}
