package remote_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
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
func startTCPDevice(t *testing.T, secret string) (addr string, stderr *bufio.Scanner) {
	t.Helper()
	exe, _ := os.Executable()
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "GOFFLOAD_ROLE=device", "GOFFLOAD_LISTEN=127.0.0.1:0", "GOFFLOAD_SECRET="+secret)
	pipe, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		if _, a, ok := strings.Cut(sc.Text(), " serving on "); ok {
			return a, sc
		}
	}
	t.Fatal("the device process did not say where it serves")
	return "", nil
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

// TestSmallMessagesPassBulk: while 256 MiB stream each way, a small request
// is answered long before the transfer ends — it waits for one fragment, not
// for the whole transfer.
// smallK is the small round trip of TestSmallMessagesPassBulk.
var smallK = mustKernel("remotetest.small", func() {})

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
		q2.Close()
		if err := q.Synchronize(); err != nil {
			t.Fatal(err)
		}
		total := time.Since(start)
		t.Logf("%s: a small round trip took %v while the transfer took %v", dir, smallTook, total)
		if smallTook*4 > total {
			t.Errorf("%s: a small round trip took %v of the transfer's %v: it waited behind the bulk data", dir, smallTook, total)
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
