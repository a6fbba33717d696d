package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The mpi suite's mpi.host_compute_idle_device (issue 34): the host rank's
// own Go code, one goroutine of pure CPU work per P, while the job's MPI
// devices sit idle after a first launch, against the same loop in a child
// process of this executable outside MPI (role "compute", started with the
// launcher's environment removed), timed by each process itself and in
// alternating rounds. An idle MPI device must cost the host's Go code
// nothing measurable: the goal is a ratio of at most 1.05.

// loopIters is the work of one goroutine in one loop: about 20–40 ms.
const loopIters = 30_000_000

var computeSink atomic.Uint64

// computeLoop runs one goroutine per P, each iters rounds of arithmetic
// with nothing shared, and returns how long they took together.
func computeLoop(iters int) time.Duration {
	n := runtime.GOMAXPROCS(0)
	t0 := time.Now()
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := uint64(g + 1)
			for range iters {
				x = x*6364136223846793005 + 1442695040888963407
			}
			computeSink.Add(x)
		}()
	}
	wg.Wait()
	return time.Since(t0)
}

// serveCompute is the child's side: each 8-byte little-endian iteration
// count read from in is answered with the loop's time in nanoseconds, until
// end of stream.
func serveCompute(in io.Reader, out io.Writer) error {
	var b [8]byte
	for {
		if _, err := io.ReadFull(in, b[:]); err != nil {
			return endOfStream(err)
		}
		d := computeLoop(int(binary.LittleEndian.Uint64(b[:])))
		binary.LittleEndian.PutUint64(b[:], uint64(d.Nanoseconds()))
		if _, err := out.Write(b[:]); err != nil {
			return err
		}
	}
}

// computePeer is a child process that runs computeLoop on request.
type computePeer struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out io.ReadCloser
}

// launcherEnv reports whether an environment variable is one an MPI
// launcher sets for its ranks: the baseline must not look like a rank.
func launcherEnv(kv string) bool {
	for _, p := range []string{"OMPI_", "PMI_", "PMIX_", "HYDRA_", "MPI_LOCAL"} {
		if strings.HasPrefix(kv, p) {
			return true
		}
	}
	return false
}

// startComputePeer starts this executable as a compute peer, outside MPI,
// with this process's GOMAXPROCS.
func startComputePeer() (*computePeer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find this program's executable to start a compute peer: %w", err)
	}
	cmd := exec.Command(exe)
	for _, kv := range os.Environ() {
		if !launcherEnv(kv) && !strings.HasPrefix(kv, "GOMAXPROCS=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, envPeerRole+"=compute", "GOMAXPROCS="+strconv.Itoa(runtime.GOMAXPROCS(0)))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &computePeer{cmd: cmd}
	if p.in, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if p.out, err = cmd.StdoutPipe(); err != nil {
		return nil, err
	}
	runtime.LockOSThread() // Pdeathsig follows the thread that forks
	err = cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("starting a compute peer: %w", err)
	}
	return p, nil
}

// loop has the peer run computeLoop(iters) and returns its time.
func (p *computePeer) loop(iters int) (time.Duration, error) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(iters))
	if _, err := p.in.Write(b[:]); err != nil {
		return 0, fmt.Errorf("compute peer: %w", err)
	}
	if _, err := io.ReadFull(p.out, b[:]); err != nil {
		return 0, fmt.Errorf("compute peer: %w", err)
	}
	return time.Duration(binary.LittleEndian.Uint64(b[:])), nil
}

func (p *computePeer) close() error {
	p.in.Close()
	return p.cmd.Wait()
}

// hostComputeRow measures mpi.host_compute_idle_device (or another
// metric's name): the loop here against the loop in a compute peer.
func hostComputeRow(env *Env, metric string) error {
	p, err := startComputePeer()
	if err != nil {
		return err
	}
	ts, err := env.CompareSelfTimed(
		func() (time.Duration, error) { return computeLoop(loopIters), nil },
		func() (time.Duration, error) { return p.loop(loopIters) },
	)
	if cerr := p.close(); err == nil && cerr != nil {
		err = fmt.Errorf("compute peer: %w", cerr)
	}
	if err != nil {
		return err
	}
	env.Report(Result{Metric: metric, Goffload: ts[0], Baseline: ts[1],
		Note: fmt.Sprintf("%d goroutines of pure Go work on the host rank, MPI devices idle, ÷ the same in a process outside MPI (goal ≤ 1.05)", runtime.GOMAXPROCS(0))})
	return nil
}
