// Package remote is the device kind whose devices are CPU processes of the
// program. They are of three sorts. Local device processes run on this
// machine (local:N), linked through shared memory. Processes on other
// machines are reached over TCP (tcp://host:port). TCP is TLS 1.3 by default,
// with the shared secret proved over each session (package stream). And the
// ranks of an MPI job serve as devices (mpi). The host drives each through a
// link that carries typed frames (package proto). The frames come in the
// order package state rules.
//
// The same binary is the host and the device. A process started as a device
// serves from offload.Start or role.ServeDevice (the kind's ServeIfDevice
// hook). It never returns to the program.
//
// The kind is in layers. This package opens devices and serves as one.
// local.go starts local device processes and introduces them to each other.
// tcp.go opens tcp:// devices and serves hosts on a TCP device (admission,
// the handshake's limits). mpi.go opens the ranks of an MPI job, and serve.go
// sets a process's role. Package engine is the protocol (link, host and
// device sides, peers), the same over every transport. Packages shm, stream
// and mpi are the transports, behind package transport's interface. Stream
// also protects TCP sessions: TLS 1.3 and the secret's proofs. Packages proto
// and state are the frames and their rules, as plain encoding and state.
package remote

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"

	"github.com/goffload/offload/internal/waitpoll"
	"github.com/goffload/offload/internal/workpool"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/engine"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/shm"
	"github.com/goffload/offload/plugins/remote/stream"
	"github.com/goffload/offload/plugins/remote/transport"
)

// ErrSilent is wrapped by the error of a link on which nothing came for too
// long. That is longer than the device timeout (GOFFLOAD_DEVICE_TIMEOUT).
var ErrSilent = engine.ErrSilent

// ErrMismatch is wrapped when a host and a device process run different code:
// their kernel tables or protocol versions differ. They are refused at hello.
var ErrMismatch = proto.ErrMismatch

// IsDevice reports whether this process was started as a device.
func IsDevice() bool { return os.Getenv(envRole) != "" }

// servingRank says this process is an MPI job's device rank, serving.
var servingRank atomic.Bool

// Serving reports whether this process serves as a device. It does if it was
// started as one, or is a device rank of an MPI job. Code that runs here (a
// kernel) is not the program's host side. There is no runtime to launch, map
// or wait with.
func Serving() bool { return IsDevice() || servingRank.Load() }

// ServeIfDevice serves as a device and exits the process if the environment
// says this process is one (GOFFLOAD_ROLE=device). Otherwise it returns at
// once. Under an MPI launcher (and built with -tags mpi), every rank but the
// host's serves the host rank and exits.
//
// A device started by a host on this machine serves that host over the
// inherited socket (GOFFLOAD_FD). It exits when the host says so or goes
// away. One with GOFFLOAD_LISTEN serves every host that proves
// GOFFLOAD_SECRET, until it is killed. Its kernels are img's.
func ServeIfDevice(img *plugin.Image) {
	role := os.Getenv(envRole)
	if role == "" {
		serveMPIIfDevice(img)
		return
	}
	if role != "device" {
		fmt.Fprintf(os.Stderr, "goffload: %s=%q: the only role is \"device\"\n", envRole, role)
		os.Exit(2)
	}
	if os.Getenv(envCrowd) == "1" {
		waitpoll.SetCrowded(true)
	}
	if err := serve(img); err != nil {
		fmt.Fprintf(os.Stderr, "goffload device (pid %d): %v\n", os.Getpid(), err)
		os.Exit(1)
	}
	os.Exit(0)
}

// deviceProcs is how many Go processors a local device process runs on
// where it is not the runtime's default (0: the default). On a crowded
// machine (the host and its local devices outnumber the cores) it is the
// device's cores. The process then runs one thread of Go code per core it
// was given. With the default, a device that waits for another device's
// signal polled on one processor while its link's reader polled on another:
// two busy threads, which took the core of the device being waited for, and
// a recorded stencil's kernels ran at 55–80% of their speed
// (docs/tasks.md). On one processor, a goroutine that polls keeps the
// runtime's network poller from running. So it is only for a link over
// shared memory, whose parked reader a poller kicks (a graph lane's spin,
// package engine). It is not for a process that serves an accelerator (its
// driver's threads are not the device's cores), nor where the user set
// GOMAXPROCS.
func deviceProcs(cores int, t transport.Transport) int {
	if os.Getenv(envCrowd) != "1" || os.Getenv(envServe) != "" {
		return 0
	}
	if _, set := os.LookupEnv("GOMAXPROCS"); set {
		return 0
	}
	if _, ok := t.(transport.Kicker); !ok {
		return 0
	}
	return min(cores, runtime.NumCPU())
}

// pollWhileComputing makes the workers of this device process's kernels
// poll for their next chunk while a replayed graph's kernel runs here, when
// its link readers do not poll (internal/workpool's SetSpinWhile): one
// polling role in the process at a time. A replay's kernels follow each
// other with no wait for the host, and each loop's chunks then start at
// once instead of after a thread wake-up each. Between synchronous
// launches they do not: there the pollers only took the cores the host's
// next launch needed (conjugate gradient on local:1, 270–285 → 315–330 ms).
func pollWhileComputing() {
	workpool.SetSpinWhile(func() bool { return transport.Computing() && engine.Replaying() })
}

// deviceCores is GOFFLOAD_DEVICE_CORES, or every CPU when it is unset.
func deviceCores() (int, error) {
	s := os.Getenv(envCores)
	if s == "" {
		return runtime.NumCPU(), nil
	}
	return workpool.ParseWorkers(envCores, s)
}

func serve(img *plugin.Image) error {
	if err := engine.CheckTimeout(); err != nil {
		return err
	}
	cores, err := deviceCores()
	if err != nil {
		return err
	}
	pollWhileComputing()
	if fd := os.Getenv(envFD); fd != "" {
		n, err := strconv.Atoi(fd)
		if err != nil || n < 3 {
			return fmt.Errorf("%s=%q: want an inherited descriptor", envFD, fd)
		}
		f := os.NewFile(uintptr(n), "goffload-host")
		conn, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("inherited socket: %w", err)
		}
		t, err := localDeviceLink(conn)
		if err != nil {
			conn.Close()
			return err
		}
		if procs := deviceProcs(cores, t); procs > 0 {
			runtime.GOMAXPROCS(procs)
		}
		s := engine.NewSession(t, img, cores)
		s.Kind = "local"
		if s.Serves, err = servedOpener(os.Getenv(envServe), true); err != nil {
			conn.Close()
			return err
		}
		if side := os.Getenv(envSide); side != "" {
			if n, err := strconv.Atoi(side); err == nil && n >= 3 {
				f := os.NewFile(uintptr(n), "goffload-side")
				if c, err := net.FileConn(f); err == nil {
					if uc, ok := c.(*net.UnixConn); ok {
						go receivePeers(s, uc)
					}
				}
				f.Close()
			}
		}
		return s.Serve()
	}
	addr := os.Getenv(envListen)
	if addr == "" {
		return fmt.Errorf("%s=device needs %s (started by a host) or %s=HOST:PORT", envRole, envFD, envListen)
	}
	secret := os.Getenv(envSecret)
	if secret == "" {
		return fmt.Errorf("%s=%s needs %s: TCP devices serve only hosts that prove the shared secret", envListen, addr, envSecret)
	}
	sec, err := stream.SecurityFromEnv(secret)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if sec.Plain() {
		plainNotice(fmt.Sprintf("device (pid %d) on %s", os.Getpid(), ln.Addr()))
	}
	fmt.Fprintf(os.Stderr, "goffload device (pid %d) serving on %s\n", os.Getpid(), ln.Addr())
	return serveTCPOn(ln, sec, img, cores)
}

// ServeTCP serves hosts that connect to ln and prove secret, each in its own
// session, until ln is closed. Sessions are TLS 1.3, with the secret proved
// over each session's keying material. The environment may say otherwise.
// GOFFLOAD_TCP_PLAIN=1 asks for plain TCP. GOFFLOAD_TLS_CERT,
// GOFFLOAD_TLS_KEY and GOFFLOAD_TLS_CA ask for certificates checked against a
// CA besides the secret. A host that fails the proof is refused, and the
// device goes on serving others.
//
// Until a host has proved the secret, its connection is bounded. At most 64
// connections are in the handshake at once, 8 from one address. A newer one
// closes its address's oldest, or the oldest of the address that holds the
// most. A handshake must end within 5 seconds. A handshake frame is at most a
// few hundred bytes. Errors accepting a connection (out of descriptors) pause
// the device rather than end it. The pause is 5 ms, doubling up to 1 s.
// Refusals go to stderr, at most 10 lines a second.
func ServeTCP(ln net.Listener, secret string, img *plugin.Image, cores int) error {
	sec, err := stream.SecurityFromEnv(secret)
	if err != nil {
		return err
	}
	return serveTCPOn(ln, sec, img, cores)
}

// localDeviceLink is a local device's link to its host. It goes through the
// shared memory the host handed over (GOFFLOAD_SHM_FD), with conn only
// telling that the host is gone. Else it goes through conn itself.
func localDeviceLink(conn net.Conn) (transport.Transport, error) {
	fd := os.Getenv(envShm)
	if fd == "" {
		return stream.New(conn), nil
	}
	n, err := strconv.Atoi(fd)
	if err != nil || n < 3 {
		return nil, fmt.Errorf("%s=%q: want an inherited descriptor", envShm, fd)
	}
	f := os.NewFile(uintptr(n), "goffload-link")
	defer f.Close()
	return shm.New(int(f.Fd()), 1, conn, "the host ended (its socket closed)")
}
