package remote_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/mpi"
	"github.com/goffload/offload/internal/mpitest"
	"github.com/goffload/offload/internal/opencltest"
	"github.com/goffload/offload/internal/proctest"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
	"github.com/goffload/offload/plugins/remote"
)

// The device processes the tests start are this test binary: they serve
// before running any test.
func TestMain(m *testing.M) {
	remote.ServeIfDevice(entries.Current())
	if os.Getenv("GOFFLOAD_TEST_ROLE") == "host" {
		hostThenSleep()
	}
	code := m.Run()
	if err := remote.FinishMPI(); err != nil { // under mpirun: the host rank ends MPI
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// hostThenSleep plays a host that starts two devices, says their pids, and
// waits to be killed.
func hostThenSleep() {
	k, _ := plugin.LookupKind("local")
	devs, err := k.Open("2")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	for i, d := range devs {
		if err := d.Load(entries.Current(), i); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println("pid", d.Info().PID)
	}
	time.Sleep(time.Hour)
	os.Exit(0)
}

func mustKernel(name string, fn any) plugin.Kernel {
	k, err := entries.RegisterKernel(name, fn)
	if err != nil {
		panic(err)
	}
	return k
}

var (
	sleepK = mustKernel("remotetest.sleep", func(ms int64) { time.Sleep(time.Duration(ms) * time.Millisecond) })
	printK = mustKernel("remotetest.print", func(n int32) {
		fmt.Printf("hello from kernel %d\n", n)
		fmt.Fprintf(os.Stderr, "warning from kernel %d\n", n)
	})
	addK = mustKernel("remotetest.add", func(v float64, x []float64) {
		for i := range x {
			x[i] += v
		}
	})
	// This kernel's name differs in a device process started with
	// GOFFLOAD_TEST_VARIANT set, which makes its kernel table differ.
	_ = mustKernel(variantName(), func() {})
)

func variantName() string {
	if os.Getenv("GOFFLOAD_TEST_VARIANT") != "" {
		return "remotetest.variant.v2"
	}
	return "remotetest.variant"
}

// openLocal starts n device processes and loads them as devices 0..n-1.
func openLocal(t testing.TB, n int) []plugin.Device {
	t.Helper()
	k, ok := plugin.LookupKind("local")
	if !ok {
		t.Fatal("kind local is not registered")
	}
	devs, err := k.Open(fmt.Sprint(n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range devs {
			d.Close()
		}
	})
	img := entries.Current()
	for i, d := range devs {
		if err := d.Load(img, i); err != nil {
			t.Fatal(err)
		}
	}
	return devs
}

func TestRoundTrip(t *testing.T) {
	d := openLocal(t, 1)[0]
	info := d.Info()
	if info.Kind != "local" || info.PID == 0 || info.PID == os.Getpid() || info.Host == "" || info.Cores < 1 || info.Arch != runtime.GOARCH {
		t.Errorf("info = %+v", info)
	}
	const n = 3<<20 + 7 // several fragments, pulled
	x := make([]float64, n)
	for i := range x {
		x[i] = float64(i)
	}
	p, err := d.Alloc(int64(n * 8))
	if err != nil {
		t.Fatal(err)
	}
	q, _ := d.NewQueue()
	raw := f64bytes(x)
	if err := q.Submit(p, raw); err != nil {
		t.Fatal(err)
	}
	if err := q.Launch(addK, []plugin.Arg{{Scalar: 0.5}, {Ptr: p, Len: n}}); err != nil {
		t.Fatal(err)
	}
	y := make([]float64, n)
	if err := q.Retrieve(f64bytes(y), p); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i := range y {
		if y[i] != x[i]+0.5 {
			t.Fatalf("y[%d] = %v, want %v", i, y[i], x[i]+0.5)
		}
	}
	if err := d.Free(p); err != nil {
		t.Fatal(err)
	}
}

// TestDeviceKilledMidKernel kills a device process while it runs a kernel:
// the pending and later operations fail within a second with an error that
// names the device and the cause, and the other device keeps working.
func TestDeviceKilledMidKernel(t *testing.T) {
	devs := openLocal(t, 2)
	victim, other := devs[0], devs[1]
	q, _ := victim.NewQueue()
	// The kill lands while the long kernel runs: an event recorded just
	// before it says when the device reached it (not a sleep that a loaded
	// machine can outlast).
	reached, _ := victim.NewEvent()
	q.Record(reached)
	if err := q.Launch(sleepK, []plugin.Arg{{Scalar: int64(60_000)}}); err != nil {
		t.Fatal(err)
	}
	ev, _ := victim.NewEvent()
	q.Record(ev)
	if err := reached.Synchronize(); err != nil {
		t.Fatal(err)
	}
	pid := victim.Info().PID
	start := time.Now()
	syscall.Kill(pid, syscall.SIGKILL)
	err := q.Synchronize()
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the failure took %v to surface, want well under 10s (it comes with the process's end, not the 30s device timeout)", took)
	}
	checkLost(t, err, pid)
	if err := ev.Synchronize(); !errors.Is(err, plugin.ErrDeviceLost) {
		t.Errorf("event of a dead device: %v", err)
	}
	if _, err := victim.Alloc(8); !errors.Is(err, plugin.ErrDeviceLost) {
		t.Errorf("alloc after death: %v", err)
	}
	if err := q.Launch(sleepK, []plugin.Arg{{Scalar: int64(1)}}); !errors.Is(err, plugin.ErrDeviceLost) {
		t.Errorf("launch after death: %v", err)
	}
	checkAlive(t, other)
}

// TestDeviceKilledMidTransfer kills a device process while 256 MiB stream to
// it, and another while 256 MiB stream back.
func TestDeviceKilledMidTransfer(t *testing.T) {
	const size = 256 << 20
	buf := make([]byte, size)
	for _, dir := range []string{"submit", "retrieve"} {
		t.Run(dir, func(t *testing.T) {
			devs, q := startBigCopy(t, dir, buf)
			time.Sleep(2 * time.Millisecond)
			pid := devs[0].Info().PID
			start := time.Now()
			syscall.Kill(pid, syscall.SIGKILL)
			err := q.Synchronize()
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("the failure took %v to surface, want well under 10s (it comes with the process's end, not the 30s device timeout)", took)
			}
			checkLost(t, err, pid)
			checkAlive(t, devs[1])
		})
	}
}

func checkLost(t *testing.T, err error, pid int) {
	t.Helper()
	if !errors.Is(err, plugin.ErrDeviceLost) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", pid)) || !strings.Contains(err.Error(), "killed") {
		t.Errorf("got %v, want ErrDeviceLost naming pid %d and the signal", err, pid)
	}
}

func checkAlive(t *testing.T, d plugin.Device) {
	t.Helper()
	p, err := d.Alloc(64)
	if err != nil {
		t.Fatalf("other device: %v", err)
	}
	q, _ := d.NewQueue()
	x := []float64{1, 2}
	q.Submit(p, f64bytes(x))
	q.Launch(addK, []plugin.Arg{{Scalar: 1.0}, {Ptr: p, Len: 2}})
	q.Retrieve(f64bytes(x), p)
	if err := q.Synchronize(); err != nil || x[0] != 2 || x[1] != 3 {
		t.Errorf("other device after the failure: %v, %v", err, x)
	}
}

// TestImageMismatch starts a device process whose kernel table differs: it
// is refused at hello with both digests.
func TestImageMismatch(t *testing.T) {
	t.Setenv("GOFFLOAD_TEST_VARIANT", "1")
	k, _ := plugin.LookupKind("local")
	devs, err := k.Open("1")
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	img := entries.Current()
	err = devs[0].Load(img, 0)
	if !errors.Is(err, remote.ErrMismatch) || !strings.Contains(err.Error(), img.Digest) || !strings.Contains(err.Error(), "different code") {
		t.Fatalf("got %v, want ErrMismatch naming both digests", err)
	}
}

// startTCPDevice starts a device process listening on a loopback port and
// returns its address.
func startTCPDevice(t *testing.T, secret string, env ...string) (addr string, stderr *bufio.Scanner) {
	t.Helper()
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOFFLOAD_ROLE=device", "GOFFLOAD_LISTEN=127.0.0.1:0", "GOFFLOAD_SECRET="+secret)
	cmd.Env = append(cmd.Env, env...)
	pipe, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	a, sc, err := proctest.ServingAddr(pipe)
	if err != nil {
		t.Fatal(err)
	}
	return a, sc
}

// TestTCPSecret: a wrong or missing secret is refused on both sides, and the
// device goes on serving hosts that know it.
func TestTCPSecret(t *testing.T) {
	addr, stderr := startTCPDevice(t, "s3cret-0123456789")
	k, _ := plugin.LookupKind("tcp")

	t.Setenv("GOFFLOAD_SECRET", "")
	if _, err := k.Open(addr); !errors.Is(err, plugin.ErrBadSpec) || !strings.Contains(err.Error(), "GOFFLOAD_SECRET") {
		t.Errorf("no secret: %v", err)
	}
	t.Setenv("GOFFLOAD_SECRET", "wrong-0123456789")
	if _, err := k.Open(addr); !errors.Is(err, remote.ErrAuth) {
		t.Errorf("wrong secret: %v, want ErrAuth", err)
	}
	if !stderr.Scan() || !strings.Contains(stderr.Text(), "refused host") || !strings.Contains(stderr.Text(), "shared secret") {
		t.Errorf("device side: %q", stderr.Text())
	}
	// Over a real socket: the failed proof pauses this address's next
	// ones, refused unchecked (the right secret too), until the pause is over.
	t.Setenv("GOFFLOAD_SECRET", "s3cret-0123456789")
	devs, err := k.Open(addr)
	if !errors.Is(err, remote.ErrAuth) || !strings.Contains(err.Error(), "too many failed proofs from 127.0.0.1: try again in") {
		t.Errorf("the right secret right after a wrong one: %v, want ErrAuth saying to try again later", err)
		if err == nil {
			devs[0].Close()
		}
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if devs, err = k.Open(addr); err == nil || !strings.Contains(err.Error(), "too many failed proofs") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	if err := devs[0].Load(entries.Current(), 0); err != nil {
		t.Fatal(err)
	}
	if kind := devs[0].Info().Kind; kind != "tcp" {
		t.Errorf("a TCP device's kind is %q, want tcp", kind)
	}
	checkAlive(t, devs[0])
}

// TestNoLeaks opens and closes devices, kills one, and checks that no
// goroutine is left behind.
func TestNoLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		k, _ := plugin.LookupKind("local")
		devs, err := k.Open("2")
		if err != nil {
			t.Fatal(err)
		}
		img := entries.Current()
		for i, d := range devs {
			if err := d.Load(img, i); err != nil {
				t.Fatal(err)
			}
			checkAlive(t, d)
		}
		q, _ := devs[0].NewQueue()
		q.Launch(sleepK, []plugin.Arg{{Scalar: int64(10_000)}})
		syscall.Kill(devs[0].Info().PID, syscall.SIGKILL)
		q.Synchronize()
		for _, d := range devs {
			d.Close()
		}
	}()
	deadline := time.Now().Add(20 * time.Second) // goroutines end soon after Close; only a leak stays
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// TestExchangeBetweenDevices copies device to device straight between two
// device processes, both ways, with several fragments and at offsets.
func TestExchangeBetweenDevices(t *testing.T) {
	devs := openLocal(t, 2)
	const n = 1<<17 + 3 // 1 MiB and a bit: several fragments
	x := make([]float64, n)
	for i := range x {
		x[i] = float64(i) * 1.5
	}
	p0, _ := devs[0].Alloc(n * 8)
	p1, _ := devs[1].Alloc(n * 8)
	q0, _ := devs[0].NewQueue()
	q1, _ := devs[1].NewQueue()
	q0.Submit(p0, f64bytes(x))
	if err := q0.(plugin.Exchanger).Exchange(devs[1], p1+8, p0+8, (n-1)*8); err != nil {
		t.Fatal(err)
	}
	if err := q0.Synchronize(); err != nil {
		t.Fatal(err)
	}
	q1.Launch(addK, []plugin.Arg{{Scalar: 1.0}, {Ptr: p1 + 8, Len: n - 1}})
	if err := q1.(plugin.Exchanger).Exchange(devs[0], p0+8, p1+8, (n-1)*8); err != nil {
		t.Fatal(err)
	}
	if err := q1.Synchronize(); err != nil {
		t.Fatal(err)
	}
	y := make([]float64, n)
	q0.Retrieve(f64bytes(y), p0)
	if err := q0.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if y[i] != x[i]+1 {
			t.Fatalf("y[%d] = %v, want %v", i, y[i], x[i]+1)
		}
	}
	// An exchange into memory the other device does not have fails.
	q0.(plugin.Exchanger).Exchange(devs[1], 0x10, p0, 8)
	if err := q0.Synchronize(); !errors.Is(err, plugin.ErrBadPointer) {
		t.Errorf("exchange to a bad pointer: %v, want ErrBadPointer", err)
	}
}

// TestDevicesDieWithHost kills a host with SIGKILL: its device processes
// must not outlive it.
func TestDevicesDieWithHost(t *testing.T) {
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOFFLOAD_TEST_ROLE=host")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var pids []int
	for len(pids) < 2 && sc.Scan() {
		var pid int
		if _, err := fmt.Sscanf(sc.Text(), "pid %d", &pid); err == nil {
			pids = append(pids, pid)
		} else if !strings.HasPrefix(sc.Text(), "[device") {
			t.Fatalf("host said %q", sc.Text())
		}
	}
	if len(pids) != 2 {
		t.Fatal("the host did not start its devices")
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) != nil {
			t.Fatalf("device %d is not running", pid)
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(20 * time.Second) // a margin only a device that outlives its host exceeds
	for _, pid := range pids {
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			var ws syscall.WaitStatus
			syscall.Wait4(pid, &ws, syscall.WNOHANG, nil) // reap it if it is ours (it is not: init does)
			time.Sleep(10 * time.Millisecond)
		}
		if err := syscall.Kill(pid, 0); err == nil {
			if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(st), ") Z ") {
				t.Errorf("device process %d outlived its host", pid)
			}
		}
	}
}

// TestDeviceOutputPrefixed: what a kernel prints reaches the host's stdout
// and stderr, each line prefixed with the device number.
func TestDeviceOutputPrefixed(t *testing.T) {
	rOut, wOut, _ := os.Pipe()
	rErr, wErr, _ := os.Pipe()
	stdout, stderr := os.Stdout, os.Stderr
	os.Stdout, os.Stderr = wOut, wErr
	devs := openLocal(t, 2)
	os.Stdout, os.Stderr = stdout, stderr
	q, _ := devs[1].NewQueue()
	q.Launch(printK, []plugin.Arg{{Scalar: int32(7)}})
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		r    *os.File
		want string
	}{{rOut, "[device 1] hello from kernel 7"}, {rErr, "[device 1] warning from kernel 7"}} {
		line, err := bufio.NewReader(c.r).ReadString('\n')
		if err != nil || strings.TrimSpace(line) != c.want {
			t.Errorf("got %q (%v), want %q", line, err, c.want)
		}
	}
}

// smallK is the small round trip of TestSmallMessagesPassBulk.
var smallK = mustKernel("remotetest.small", func() {})

// TestSmallMessagesPassBulk: while 256 MiB stream each way, a small request
// is answered before the transfer ends: it waits for one fragment, not for
// the whole transfer.
func TestSmallMessagesPassBulk(t *testing.T) {
	const size = 256 << 20
	d := openLocal(t, 1)[0]
	p, err := d.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size)
	for _, dir := range []string{"to the device", "from the device"} {
		q, _ := d.NewQueue()
		if dir == "to the device" {
			q.Submit(p, buf)
		} else {
			q.Retrieve(buf, p)
		}
		// A round trip on the same connection, on another queue: a kernel
		// launched and waited for (an Alloc no longer waits for the device,
		// so it measured nothing).
		start := time.Now()
		q2, _ := d.NewQueue()
		if err := q2.Launch(smallK, nil); err != nil {
			t.Fatal(err)
		}
		if err := q2.Synchronize(); err != nil {
			t.Fatal(err)
		}
		smallTook := time.Since(start)
		bulkDone, err := q.Query()
		if err != nil {
			t.Fatal(err)
		}
		q2.Close()
		if err := q.Synchronize(); err != nil {
			t.Fatal(err)
		}
		total := time.Since(start)
		t.Logf("%s: a small round trip took %v while the transfer took %v", dir, smallTook, total)
		// An order, not a ratio of times (a loaded machine under -race
		// stretched the round trip to a third of the transfer): the answer
		// came while the transfer was still going.
		if bulkDone {
			t.Errorf("%s: the small round trip (%v) was answered only after the transfer had ended: it waited behind the bulk data", dir, smallTook)
		}
	}
}

// startBigCopy opens two local devices and starts a copy of buf to the
// first (dir "submit") or from it ("retrieve"); it returns the devices and
// the copy's queue.
func startBigCopy(t *testing.T, dir string, buf []byte) ([]plugin.Device, plugin.Queue) {
	t.Helper()
	devs := openLocal(t, 2)
	p, err := devs[0].Alloc(int64(len(buf)))
	if err != nil {
		t.Fatal(err)
	}
	q, _ := devs[0].NewQueue()
	if dir == "submit" {
		err = q.Submit(p, buf)
	} else {
		err = q.Retrieve(buf, p)
	}
	if err != nil {
		t.Fatal(err)
	}
	return devs, q
}

func f64bytes(x []float64) []byte {
	if len(x) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), len(x)*8)
}

var nopK = mustKernel("remotetest.nop", func() {})

// TestWaitNotOvertakenByForget: a wait still queued on the host must reach
// the device before the batch that makes the device forget its event
// (issue 7, 3: the batch overtook it, and the device failed the wait as
// "event not recorded").
func TestWaitNotOvertakenByForget(t *testing.T) {
	d := openLocal(t, 1)[0]
	q1, _ := d.NewQueue()
	q2, _ := d.NewQueue()
	q3, _ := d.NewQueue()
	ev, _ := d.NewEvent()
	if err := q1.Launch(sleepK, []plugin.Arg{{Scalar: int64(100)}}); err != nil {
		t.Fatal(err)
	}
	if err := q1.Record(ev); err != nil {
		t.Fatal(err)
	}
	if err := q2.Wait(ev); err != nil { // queued, not written: q2 writes at its next mark
		t.Fatal(err)
	}
	if err := ev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	ev.Close()
	for i := 0; i < 600; i++ { // enough closed events for a forget batch
		e, _ := d.NewEvent()
		if err := q3.Record(e); err != nil {
			t.Fatal(err)
		}
		if err := e.Synchronize(); err != nil {
			t.Fatal(err)
		}
		e.Close()
	}
	if err := q2.Launch(nopK, nil); err != nil {
		t.Fatal(err)
	}
	if err := q2.Synchronize(); err != nil {
		t.Fatalf("the queue that waited: %v", err)
	}
}

// TestCallsRacingLoss: calls made while the device process dies all return
// (issue 7, 5: a call that registered after the loss drained the pending
// set waited forever).
func TestCallsRacingLoss(t *testing.T) {
	for round := 0; round < 3; round++ {
		d := openLocal(t, 1)[0]
		pid := d.Info().PID
		var wg sync.WaitGroup
		started := make(chan struct{}, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					if i == 20 {
						started <- struct{}{}
					}
					var err error
					switch i % 3 {
					case 0:
						var p plugin.Ptr
						if p, err = d.Alloc(64); err == nil {
							err = d.Free(p)
						}
					case 1:
						var ev plugin.Event
						if ev, err = d.NewEvent(); err == nil {
							ev.Close()
						}
					case 2:
						var q plugin.Queue
						if q, err = d.NewQueue(); err == nil {
							err = q.Launch(nopK, nil)
							if err == nil {
								err = q.Synchronize()
							}
						}
					}
					if err != nil {
						if !errors.Is(err, plugin.ErrDeviceLost) || !strings.Contains(err.Error(), "local device 0") {
							t.Errorf("got %v, want ErrDeviceLost naming the device", err)
						}
						return
					}
				}
			}()
		}
		for g := 0; g < 8; g++ {
			<-started
		}
		syscall.Kill(pid, syscall.SIGKILL)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("calls racing the device's loss hung")
		}
	}
}

// mpiFlavors are the MPIs the jobs are built against.
var mpiFlavors = mpitest.Flavors

// goRoot is the GOROOT of the go command that runs the tests.
var goRoot = mpitest.GoRoot

// TestMPIJobs builds this package's tests and the examples with MPI support
// against OpenMPI and against MPICH, and runs them as jobs of three ranks
// under each one's launcher: the conformance suite and a kernel panic on
// MPI devices (the tests named MPIRank), saxpy, the pipeline with its
// device-to-device halos, and a device rank that exits in a kernel; and
// saxpy, the pipeline, the suite and a rank's exit on ranks serving PoCL
// (proxied). An MPI
// that is not installed is skipped, unless GOFFLOAD_REQUIRE_MPI is set (as
// .ci/run does, after installing both).
func TestMPIJobs(t *testing.T) {
	if mpi.Launched() {
		t.Skip("inside an MPI job: this test starts the jobs")
	}
	if testing.Short() {
		t.Skip("-short: builds and runs MPI jobs")
	}
	for _, f := range mpiFlavors {
		t.Run(f.Name, func(t *testing.T) {
			f.Need(t, f.CC, f.Launcher)
			dir := t.TempDir()
			test := filepath.Join(dir, "remote.test")
			f.GoBuild(t, "test", "-c", "-race", "-tags", f.Tags, "-o", test, ".")
			f.GoBuild(t, "build", "-tags", f.Tags, "-o", filepath.Join(dir, "saxpy"), "../../examples/saxpy")
			f.GoBuild(t, "build", "-tags", f.Tags, "-o", filepath.Join(dir, "pipeline"), "../../examples/pipeline")

			t.Run("conformance", func(t *testing.T) {
				out, err := f.Run(t, 3, 2*time.Minute, nil, nil, test, "-test.run", "MPIRank", "-test.v")
				if err != nil || !strings.Contains(out, "--- PASS: TestMPIRankConformance") || !strings.Contains(out, "--- PASS: TestMPIRankKernelPanic") {
					t.Fatalf("%v\n%s", err, out)
				}
			})
			t.Run("saxpy", func(t *testing.T) {
				out, err := f.Run(t, 3, 2*time.Minute, nil, nil, filepath.Join(dir, "saxpy"), "-n", "1000000")
				if err != nil || !strings.Contains(out, "on 2 device(s): verified") || !strings.Contains(out, "(mpi, ") {
					t.Fatalf("%v\n%s", err, out)
				}
			})
			t.Run("pipeline", func(t *testing.T) {
				out, err := f.Run(t, 3, 2*time.Minute, nil, nil, filepath.Join(dir, "pipeline"), "-n", "100000", "-steps", "100")
				if err != nil || !strings.Contains(out, "on 2 device(s)") || !strings.Contains(out, "verified") {
					t.Fatalf("%v\n%s", err, out)
				}
			})
			t.Run("host and mpi", func(t *testing.T) {
				// An MPI device beside a host device: dependencies and
				// halos between them go through this process (issue 4's
				// fallback), those between the MPI devices straight.
				env := []string{"GOFFLOAD_DEVICES=host,mpi"}
				out, err := f.Run(t, 3, 2*time.Minute, nil, env, filepath.Join(dir, "pipeline"), "-n", "30000", "-steps", "50")
				if err != nil || !strings.Contains(out, "on 3 device(s)") || !strings.Contains(out, "verified") {
					t.Fatalf("%v\n%s", err, out)
				}
				out, err = f.Run(t, 3, 2*time.Minute, nil, env, filepath.Join(dir, "saxpy"), "-n", "30000")
				if err != nil || !strings.Contains(out, "on 3 device(s): verified") {
					t.Fatalf("%v\n%s", err, out)
				}
			})
			t.Run("proxied", func(t *testing.T) {
				// Device ranks that serve PoCL's OpenCL device (issue
				// 45): the mpi item's brackets, which every rank's
				// GOFFLOAD_DEVICES holds. saxpy and the pipeline (its
				// halos between the ranks' PoCL devices) run their
				// OpenCL C there; the suite's Go-only kernels are
				// emulated.
				opencltest.Need(t)
				env := []string{"GOFFLOAD_DEVICES=mpi[opencl]", "OMP_TARGET_OFFLOAD=MANDATORY"}
				out, err := f.Run(t, 3, 2*time.Minute, nil, env, filepath.Join(dir, "saxpy"), "-n", "100000")
				if err != nil || !strings.Contains(out, "on 2 device(s): verified") || !strings.Contains(out, "OpenCL device 0") {
					t.Fatalf("%v\n%s", err, out)
				}
				out, err = f.Run(t, 3, 2*time.Minute, nil, env, filepath.Join(dir, "pipeline"), "-n", "30000", "-steps", "50")
				if err != nil || !strings.Contains(out, "on 2 device(s)") || !strings.Contains(out, "verified") {
					t.Fatalf("%v\n%s", err, out)
				}
				out, err = f.Run(t, 3, 2*time.Minute, nil, append(env, envEmulate+"=1"), test, "-test.run", "MPIRankConformance", "-test.v")
				if err != nil || !strings.Contains(out, "--- PASS: TestMPIRankConformance") {
					t.Fatalf("%v\n%s", err, out)
				}
				// A rank serving PoCL that exits in a kernel (an emulated
				// one's Go body), as in rank exits below: the host's
				// error names the device and what it served. One device
				// rank: a second one's start would cost the test a PoCL
				// device more.
				out = rankExits(t, f, test, 2, append(env, envEmulate+"=1"))
				if f.Name == "mpich" && !regexp.MustCompile(`a device rank that exits: .*mpi device 0 \(rank 1, pid \d+ on [^,]+, opencl\)`).MatchString(out) {
					t.Fatalf("the host's error does not name the lost device rank and its OpenCL device:\n%s", out)
				}
			})
			t.Run("rank stops", func(t *testing.T) {
				// A device rank stopped (SIGSTOP) is lost after
				// GOFFLOAD_DEVICE_TIMEOUT; the host goes on with the other.
				env := []string{"GOFFLOAD_TEST_RANK_STOP=1", "GOFFLOAD_DEVICE_TIMEOUT=1s"}
				out, _ := f.Run(t, 3, 2*time.Minute, nil, env, test, "-test.run", "MPIRankStop", "-test.v")
				if !strings.Contains(out, "the other device rank went on") {
					t.Fatalf("the host did not lose the stopped device rank and go on:\n%s", out)
				}
			})
			t.Run("rank stubborn", func(t *testing.T) {
				// Stop kills a device whose kernel never returns (issue
				// 34): it says so on stderr, the rank exits without its
				// kernel, MPI is finalized, and the job's exit status is
				// the program's own (3).
				env := []string{"GOFFLOAD_TEST_RANK_STUBBORN=1"}
				out, err := f.Run(t, 3, 2*time.Minute, nil, env, test, "-test.run", "MPIRankStubborn", "-test.v")
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(out, "stubborn: MPI finalized") ||
					!strings.Contains(out, "goffload: Stop: mpi device 0 (rank 1, pid ") {
					t.Fatalf("%s: %v; want exit status 3, MPI finalized and goffload's line on stderr:\n%s", f.Launcher, err, out)
				}
			})
			t.Run("rank exits", func(t *testing.T) {
				// OpenMPI's mpirun ends the whole job when a rank exits
				// without MPI_Finalize; MPICH's mpiexec does too, unless
				// told -disable-auto-cleanup: then the host loses the
				// device after GOFFLOAD_DEVICE_TIMEOUT and goes on.
				rankExits(t, f, test, 3, nil)
			})
		})
	}
}

// rankExits runs the job of TestMPIRankExit in test (this package's test
// binary, built for f), of np ranks with env added: it must fail, and
// under MPICH the host report the lost device rank. It returns the job's
// output.
func rankExits(t *testing.T, f mpitest.Flavor, test string, np int, env []string) string {
	t.Helper()
	var extra []string
	if f.Name == "mpich" {
		extra = []string{"-disable-auto-cleanup"}
	}
	env = append([]string{"GOFFLOAD_TEST_RANK_EXIT=1", "GOFFLOAD_DEVICE_TIMEOUT=2s"}, env...)
	out, err := f.Run(t, np, 2*time.Minute, extra, env, test, "-test.run", "MPIRankExit", "-test.v")
	if err == nil {
		t.Fatalf("the job of a rank that exited ended with success:\n%s", out)
	}
	if f.Name == "mpich" && !strings.Contains(out, "--- PASS: TestMPIRankExit") {
		t.Fatalf("the host did not report the lost device rank:\n%s", out)
	}
	// The other device ranks exit without MPI_Finalize, told so by the
	// host, which does not finalize: each waited 10 s in it before.
	if f.Name == "mpich" && np > 2 && !strings.Contains(out, "exiting without MPI_Finalize: the host lost a device rank") {
		t.Fatalf("the surviving device rank did not exit without MPI_Finalize:\n%s", out)
	}
	t.Logf("%s: %v", f.Launcher, err)
	return out
}

// TestMPIBuildDefault builds saxpy as a user first would, `go build -tags
// mpi` with no CC: pkg-config's "mpi" names the system's default MPI, the
// one Debian's plain mpirun starts. And a program built for Open MPI and
// started by MPICH's launcher says so, instead of running three singletons
// that quietly keep every kernel on the host.
func TestMPIBuildDefault(t *testing.T) {
	if mpi.Launched() {
		t.Skip("inside an MPI job: this test starts the jobs")
	}
	if testing.Short() {
		t.Skip("-short: builds and runs MPI jobs")
	}
	openmpi, mpich := mpiFlavors[0], mpiFlavors[1]
	openmpi.Need(t, "pkg-config", "mpirun", openmpi.Launcher)
	mpich.Need(t, mpich.Launcher)
	dir := t.TempDir()
	plain := mpitest.Flavor{Name: "default", Tags: "mpi", Launcher: "mpirun", Env: mpitest.OpenMPIEnv}
	plain.GoBuild(t, "build", "-tags", "mpi", "-o", filepath.Join(dir, "saxpy"), "../../examples/saxpy")
	out, err := plain.Run(t, 3, 2*time.Minute, nil, nil, filepath.Join(dir, "saxpy"), "-n", "100000")
	if err != nil || !strings.Contains(out, "on 2 device(s): verified") || !strings.Contains(out, "(mpi, ") {
		t.Fatalf("saxpy built with -tags mpi alone, under mpirun: %v\n%s", err, out)
	}

	openmpi.GoBuild(t, "build", "-tags", openmpi.Tags, "-o", filepath.Join(dir, "saxpy-openmpi"), "../../examples/saxpy")
	out, err = mpich.Run(t, 3, 2*time.Minute, nil, nil, filepath.Join(dir, "saxpy-openmpi"), "-n", "1000")
	if err == nil || !strings.Contains(out, "the launcher started 3 ranks but MPI sees this process alone") || !strings.Contains(out, "Open MPI") {
		t.Fatalf("an Open MPI program under MPICH's launcher: want an error naming the mismatch, got %v\n%s", err, out)
	}
}

// A relay stands between a host and a TCP device, as anyone on the path
// can: it forwards every connection to the device, both ways, and when
// armed it alters the next chunk of at least tamperMin bytes that it
// forwards in one direction, once: it flips one bit of the chunk's last
// byte, or forwards the first half of the chunk and cuts both connections
// (a truncated record).
type relay struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	armed string // "" (forward untouched), "flip" or "cut"
	toDev bool   // alter host→device bytes, else device→host
	hits  int    // chunks altered
}

// tamperData is what the test's transfers carry.
var tamperData = bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB

// tamperMin is the smallest chunk the relay alters: the data of the test's
// transfers, not a heartbeat or an answer.
const tamperMin = 1024

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Go(func() { r.pipe(d, c, true) })
			wg.Go(func() { r.pipe(c, d, false) })
		}
	})
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) arm(mode string, toDev bool) {
	r.mu.Lock()
	r.armed, r.toDev = mode, toDev
	r.mu.Unlock()
}

// pipe copies from src to dst (toDev: host→device) until either ends, and
// then closes both.
func (r *relay) pipe(dst, src net.Conn, toDev bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			r.mu.Lock()
			mode := ""
			if r.armed != "" && r.toDev == toDev && n >= tamperMin {
				mode, r.armed = r.armed, ""
				r.hits++
			}
			r.mu.Unlock()
			switch mode {
			case "flip":
				// Where it can read the data (a plain session), the
				// relay flips a bit of the data itself; else one of the
				// chunk's last byte.
				at := n - 1
				if i := bytes.Index(chunk, tamperData[:32]); i >= 0 {
					at = i + 5
				}
				chunk[at] ^= 0x10
			case "cut":
				dst.Write(chunk[:n/2])
				return
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// openTCPDevice opens and loads the TCP device at addr.
func openTCPDevice(t *testing.T, addr string) (plugin.Device, error) {
	t.Helper()
	k, _ := plugin.LookupKind("tcp")
	devs, err := k.Open(addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { devs[0].Close() })
	if err := devs[0].Load(entries.Current(), 0); err != nil {
		return nil, err
	}
	return devs[0], nil
}

// TestTCPTamper: a relay on the path flips one bit of a transfer's bytes,
// either way, or cuts the connection in the middle of them. Each must be an
// error that names the device and says what happened — never a wrong
// result — and the device serves other hosts on.
func TestTCPTamper(t *testing.T) {
	const secret = "tamper-s3cret-0123456789"
	addr, _ := startTCPDevice(t, secret)
	t.Setenv("GOFFLOAD_SECRET", secret)
	for _, c := range []struct {
		name  string
		mode  string
		toDev bool
		cause string // in the error, besides the device's name
	}{
		{"flip-to-device", "flip", true, "altered"},
		{"flip-to-host", "flip", false, "altered"},
		{"cut-to-device", "cut", true, ""},
		{"cut-to-host", "cut", false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := startRelay(t, addr)
			d, err := openTCPDevice(t, r.addr())
			if err != nil {
				t.Fatal(err)
			}
			in := tamperData
			p, err := d.Alloc(int64(len(in)))
			if err != nil {
				t.Fatal(err)
			}
			q, _ := d.NewQueue()
			if !c.toDev { // put the data in place first, untouched
				q.Submit(p, in)
				if err := q.Synchronize(); err != nil {
					t.Fatal(err)
				}
			}
			r.arm(c.mode, c.toDev)
			out := make([]byte, len(in))
			if c.toDev {
				q.Submit(p, in)
			}
			q.Retrieve(out, p)
			err = q.Synchronize()
			r.mu.Lock()
			hits := r.hits
			r.mu.Unlock()
			if hits != 1 {
				t.Fatalf("the relay altered %d chunks, want 1 (err %v)", hits, err)
			}
			switch {
			case err == nil && !bytes.Equal(in, out):
				t.Fatalf("%s: a wrong result and no error", c.name)
			case err == nil:
				t.Fatalf("%s: no error", c.name)
			}
			msg := err.Error()
			t.Logf("%s: %v", c.name, err)
			if !errors.Is(err, plugin.ErrDeviceLost) || !strings.Contains(msg, "tcp://"+r.addr()) || !strings.Contains(msg, c.cause) {
				t.Errorf("got %v; want ErrDeviceLost naming tcp://%s and saying %q", err, r.addr(), c.cause)
			}
			// The device serves others on, and this one is gone for good.
			other, err := openTCPDevice(t, addr)
			if err != nil {
				t.Fatal(err)
			}
			checkAlive(t, other)
			if _, err := d.Alloc(8); err == nil {
				t.Error("the altered session went on")
			}
		})
	}
}

// TestTCPConformance: the conformance suite over two protected sessions
// with one TCP device process, and over two plain ones.
func TestTCPConformance(t *testing.T) {
	for _, plain := range []string{"", "1"} {
		t.Run(map[string]string{"": "tls", "1": "plain"}[plain], func(t *testing.T) {
			const secret = "conformance-s3cret-0123"
			t.Setenv("GOFFLOAD_TCP_PLAIN", plain)
			addr, _ := startTCPDevice(t, secret)
			t.Setenv("GOFFLOAD_SECRET", secret)
			plugintest.Run(t, func(t *testing.T) []plugin.Device {
				k, _ := plugin.LookupKind("tcp")
				var devs []plugin.Device
				for range 2 {
					d, err := k.Open(addr)
					if err != nil {
						t.Fatal(err)
					}
					devs = append(devs, d...)
				}
				return devs
			})
		})
	}
}

// TestTCPDeviceStoppedMidTransfer stops (SIGSTOP) a TCP device process
// while 64 MiB stream to it, and while they stream back, over a protected
// session: the copy fails with the device's silence after
// GOFFLOAD_DEVICE_TIMEOUT (a TLS write waiting for room that never comes,
// a read waiting inside a record), and nothing hangs.
func TestTCPDeviceStoppedMidTransfer(t *testing.T) {
	const secret = "stopped-s3cret-0123456789"
	buf := make([]byte, 64<<20)
	for _, dir := range []string{"submit", "retrieve"} {
		t.Run(dir, func(t *testing.T) {
			t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", "1s")
			addr, _ := startTCPDevice(t, secret)
			t.Setenv("GOFFLOAD_SECRET", secret)
			d, err := openTCPDevice(t, addr)
			if err != nil {
				t.Fatal(err)
			}
			p, err := d.Alloc(int64(len(buf)))
			if err != nil {
				t.Fatal(err)
			}
			q, _ := d.NewQueue()
			if dir == "submit" {
				q.Submit(p, buf)
			} else {
				q.Retrieve(buf, p)
			}
			pid := d.Info().PID
			syscall.Kill(pid, syscall.SIGSTOP)
			defer syscall.Kill(pid, syscall.SIGCONT)
			done := make(chan error, 1)
			go func() { done <- q.Synchronize() }()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("a copy to a stopped TCP device hangs")
			}
			if err == nil { // done before the stop landed
				q.Launch(nopK, nil)
				err = q.Synchronize()
			}
			if !errors.Is(err, plugin.ErrDeviceLost) || !strings.Contains(err.Error(), "nothing heard") || !strings.Contains(err.Error(), "tcp://"+addr) {
				t.Fatalf("after SIGSTOP: %v, want ErrDeviceLost for the silence, naming tcp://%s", err, addr)
			}
		})
	}
}

// TestTCPIdleDeviceLongerTimeout: a host whose GOFFLOAD_DEVICE_TIMEOUT is
// shorter than its tcp:// device's keeps the device through a long idle
// spell. Each side pings an idle link by its own timeout (once a second at
// the default), so the device, told the host's timeout at hello, pings
// often enough for it; before, the host lost a healthy idle device (found
// by cutting a link in the testbed: the other device, idle while the lost
// one's work was redone, was lost too).
func TestTCPIdleDeviceLongerTimeout(t *testing.T) {
	const secret = "idle-s3cret-0123456789"
	t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", "") // the default: 30s, a ping a second
	addr, _ := startTCPDevice(t, secret)
	const host = 500 * time.Millisecond
	t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", host.String())
	t.Setenv("GOFFLOAD_SECRET", secret)
	d, err := openTCPDevice(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	// The link idles for four of the host's timeouts: only the two
	// heartbeats cross it. (Idle time is what is tested: a sleep.)
	time.Sleep(4 * host)
	q, err := d.NewQueue()
	if err != nil {
		t.Fatalf("after %v idle (host timeout %v, device's the default): %v", 4*host, host, err)
	}
	q.Launch(nopK, nil)
	if err := q.Synchronize(); err != nil {
		t.Fatalf("after %v idle (host timeout %v, device's the default): %v", 4*host, host, err)
	}
}

// TestTCPDeviceMemoryAcrossHosts (issue 47 item 14): the hosts of one TCP
// device hold together at most GOFFLOAD_DEVICE_MEMORY. The host past it
// gets an error that names the device and the limit, and gets the memory
// once the other host has freed it.
func TestTCPDeviceMemoryAcrossHosts(t *testing.T) {
	const secret = "s3cret-0123456789abcdef"
	const limit, size = 64 << 20, 40 << 20
	addr, _ := startTCPDevice(t, secret, fmt.Sprintf("GOFFLOAD_DEVICE_MEMORY=%d", limit))
	t.Setenv("GOFFLOAD_SECRET", secret)
	k, _ := plugin.LookupKind("tcp")
	open := func() plugin.Device {
		devs, err := k.Open(addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { devs[0].Close() })
		if err := devs[0].Load(entries.Current(), 0); err != nil {
			t.Fatal(err)
		}
		return devs[0]
	}
	// fill allocates size bytes on d and writes them: nil once the device
	// has the memory.
	fill := func(d plugin.Device) (plugin.Ptr, error) {
		p, err := d.Alloc(size)
		if err != nil {
			return 0, err
		}
		q, err := d.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		if err := q.Submit(p, make([]byte, size)); err != nil {
			return p, err
		}
		return p, q.Synchronize()
	}
	a, b := open(), open()
	pa, err := fill(a)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := fill(b)
	if !errors.Is(err, plugin.ErrOutOfMemory) || !strings.Contains(err.Error(), fmt.Sprintf("GOFFLOAD_DEVICE_MEMORY=%d", limit)) || !strings.Contains(err.Error(), "tcp device") {
		t.Fatalf("a second host past the device's memory: %v, want ErrOutOfMemory naming the device and the limit", err)
	}
	if err := b.Free(pb); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(pa); err != nil {
		t.Fatal(err)
	}
	var last error
	for range 50 { // a's Free and b's allocation come over two links
		var p plugin.Ptr
		if p, last = fill(b); last == nil {
			break
		}
		b.Free(p)
		time.Sleep(10 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("the second host once the first freed its memory: %v", last)
	}
}
