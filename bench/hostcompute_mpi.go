//go:build mpi

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
	"syscall"
	"time"
)

// The mpi suite's mpi.host_compute_idle_device: the compute peer and the
// row (hostcompute.go has the loop, and the peer's side).

// loopIters is the work of one goroutine in one loop: about 20–40 ms.
const loopIters = 30_000_000

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
