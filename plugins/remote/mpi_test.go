//go:build mpi

package remote_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/mpi"
	"github.com/goffload/offload/internal/proctest"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
	"github.com/goffload/offload/plugins/remote"
)

// The tests here run inside an MPI job: TestMPIJobs (mpijob_test.go) starts
// this test binary under mpirun and mpiexec with -test.run MPIRank. Started
// otherwise, they have no device ranks to test.

func openMPI(t *testing.T) []plugin.Device {
	t.Helper()
	if !mpi.Launched() {
		t.Skip("not in an MPI job: TestMPIJobs runs this under mpirun")
	}
	k, _ := plugin.LookupKind("mpi")
	devs, err := k.Open("")
	if err != nil {
		t.Fatal(err)
	}
	return devs
}

// openLoadedMPI opens the job's device ranks and loads them as devices 0,
// 1, …, closed when t ends.
func openLoadedMPI(t *testing.T) []plugin.Device {
	t.Helper()
	devs := openMPI(t)
	for i, d := range devs {
		t.Cleanup(func() { d.Close() })
		if err := d.Load(entries.Current(), i); err != nil {
			t.Fatal(err)
		}
	}
	return devs
}

// TestMPIRankConformance runs the shared plugin suite on the job's device
// ranks.
func TestMPIRankConformance(t *testing.T) {
	plugintest.Run(t, openMPI)
}

var exitK = mustKernel("remotetest.exit", func(code int32) { os.Exit(int(code)) })

// TestMPIRankKernelPanic: a kernel that panics on a device rank is an error
// naming the device, the kernel and the panic value, and the rank goes on
// serving.
func TestMPIRankKernelPanic(t *testing.T) {
	devs := openLoadedMPI(t)
	d := devs[len(devs)-1]
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Launch(panicK, []plugin.Arg{{Scalar: int32(7)}}); err != nil {
		t.Fatal(err)
	}
	err = q.Synchronize()
	if !errors.Is(err, plugin.ErrKernelFailed) || !strings.Contains(err.Error(), "rank panic 7") || !strings.Contains(err.Error(), "mpi device") {
		t.Fatalf("a kernel panic on an MPI device: %v; want ErrKernelFailed naming the device and the panic value", err)
	}
	p, err := d.Alloc(8 * 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Submit(p, f64bytes([]float64{1, 2, 3, 4})); err != nil {
		t.Fatal(err)
	}
	if err := q.Launch(addK, []plugin.Arg{{Scalar: 1.5}, {Ptr: p, Len: 4}}); err != nil {
		t.Fatal(err)
	}
	out := make([]float64, 4)
	if err := q.Retrieve(f64bytes(out), p); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatalf("the device after a kernel panic: %v", err)
	}
	for i, v := range out {
		if want := float64(i+1) + 1.5; v != want {
			t.Fatalf("the device after a kernel panic computed %v, want 2.5, 3.5, 4.5, 5.5", out)
		}
	}
}

var panicK = mustKernel("remotetest.rankpanic", func(n int32) { panic("rank panic " + string(rune('0'+n))) })

// TestMPIRankExit is the host of a job whose device rank exits in a kernel:
// TestMPIJobs checks what the launcher does then (ends the job, no hang).
func TestMPIRankExit(t *testing.T) {
	if os.Getenv("GOFFLOAD_TEST_RANK_EXIT") == "" {
		t.Skip("run by TestMPIJobs")
	}
	devs := openLoadedMPI(t)
	q, err := devs[0].NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Launch(exitK, []plugin.Arg{{Scalar: int32(3)}}); err != nil {
		t.Fatalf("Launch: %v", err)
	}
	err = q.Synchronize()
	t.Logf("a device rank that exits: %v", err)
	if err == nil {
		t.Fatal("a device rank exited in a kernel and the queue synchronized without an error")
	}
}

// TestMPIRankStop is the host of a job whose device rank is stopped with
// SIGSTOP: the device is lost after GOFFLOAD_DEVICE_TIMEOUT, with an error
// that says so, and the other device goes on. The stopped rank is killed
// at the end (SIGKILL, which a stopped process takes at once): let go on
// with SIGCONT it could wait in MPI for a host that no longer talks to it,
// and Open MPI's launcher then waited for it past the job's two minutes
// now and then; a rank killed makes the launcher end the job.
func TestMPIRankStop(t *testing.T) {
	if os.Getenv("GOFFLOAD_TEST_RANK_STOP") == "" {
		t.Skip("run by TestMPIJobs")
	}
	devs := openLoadedMPI(t)
	stopped, other := devs[0], devs[1]
	pid := stopped.Info().PID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGKILL)
	proctest.WaitStopped(t, pid)
	q, err := stopped.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = q.Launch(addK, []plugin.Arg{{Scalar: 1.0}, {Ptr: 0, Len: 0}}) // enqueued without waiting: fails only if the loss came first
	if err == nil {
		err = q.Synchronize()
	}
	if !errors.Is(err, plugin.ErrDeviceLost) || !strings.Contains(err.Error(), "nothing heard") {
		t.Fatalf("a launch on a stopped device rank: %v after %v; want ErrDeviceLost, nothing heard", err, time.Since(start))
	}
	t.Logf("stopped device rank: lost after %v", time.Since(start))
	oq, err := other.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	if err := oq.Launch(addK, []plugin.Arg{{Scalar: 1.0}, {Ptr: 0, Len: 0}}); err != nil {
		t.Fatal(err)
	}
	if err := oq.Synchronize(); err != nil {
		t.Fatalf("the other device rank after one was lost: %v", err)
	}
	t.Logf("the other device rank went on")
}

// stubbornK never returns and never looks at its Ctx.
var stubbornK = mustKernel("remotetest.stubborn", func() {
	for {
		time.Sleep(time.Hour)
	}
})

// TestMPIRankStubborn is the host of a job whose device rank runs a kernel
// that never returns (issue 34): Stop's way with it, the device killed
// after the grace period and closed, then MPI ended (FinishMPI, as Stop
// does). The rank is told to exit without its kernel and MPI is finalized,
// with a line on stderr that says so, and the job's exit status is the
// one this program chooses, 3 (TestMPIJobs checks it); it was 1, with
// only the launcher's banner.
func TestMPIRankStubborn(t *testing.T) {
	if os.Getenv("GOFFLOAD_TEST_RANK_STUBBORN") == "" {
		t.Skip("run by TestMPIJobs")
	}
	devs := openMPI(t)
	for i, d := range devs {
		if err := d.Load(entries.Current(), i); err != nil {
			t.Fatal(err)
		}
	}
	q, err := devs[0].NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Launch(stubbornK, nil); err != nil {
		t.Fatal(err)
	}
	devs[0].(plugin.Killer).Kill(errors.New("killed by Stop: a test"))
	if err := q.Synchronize(); !errors.Is(err, plugin.ErrDeviceLost) {
		t.Fatalf("the killed device's queue: %v, want ErrDeviceLost", err)
	}
	for _, d := range devs {
		d.Close()
	}
	if err := remote.FinishMPI(); err != nil {
		t.Fatalf("FinishMPI after a device rank was killed by Stop: %v", err)
	}
	// Start after Stop: MPI cannot start again, and Open says so with
	// ErrKindEnded, which Start refuses under every policy.
	k, _ := plugin.LookupKind("mpi")
	if _, err := k.Open(""); !errors.Is(err, plugin.ErrKindEnded) {
		t.Fatalf("opening MPI devices after FinishMPI: %v, want ErrKindEnded", err)
	}
	fmt.Println("stubborn: MPI finalized, exiting with status 3")
	os.Exit(3)
}
