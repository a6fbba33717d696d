package testbed_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/testbed"
)

// Kernels the device processes in the machines run.
var (
	axpyK = offload.MustKernel("testbed.axpy", func(ctx offload.Ctx, a float64, x, y []float64) {
		ctx.For(len(y), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				y[i] += a * x[i]
			}
		})
	})
	// whoK writes the device's pid, so that a test sees which process
	// ran it.
	whoK = offload.MustKernel("testbed.who", func(ctx offload.Ctx, pid []int64) {
		pid[0] = int64(os.Getpid())
	})
	// holdK runs for ms milliseconds, or until its launch is cancelled.
	holdK = offload.MustKernel("testbed.hold", func(ctx offload.Ctx, ms int64, x []float64) {
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-ctx.Done():
		}
	})
)

// startDevices starts a tcp:// device process (this test binary) in each
// machine of b, with env added to each device's environment, and starts
// the runtime here on them, in order, under OMP_TARGET_OFFLOAD=MANDATORY
// (a device that does not open is an error, not a fallback to this
// process). The runtime stops when the test ends.
func startDevices(t *testing.T, b *testbed.Bed, env ...string) []*testbed.Device {
	t.Helper()
	var devs []*testbed.Device
	var specs []string
	for _, m := range b.Machines() {
		d, err := m.StartDevice(self(t), []string{"-test.run=^$"}, env...)
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, d)
		specs = append(specs, d.Spec)
	}
	t.Setenv("GOFFLOAD_SECRET", b.Secret())
	t.Setenv("OMP_TARGET_OFFLOAD", "MANDATORY")
	if err := offload.Start(offload.WithDevices(strings.Join(specs, ","))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { offload.Stop() })
	return devs
}

// checkAxpy runs axpy on device n over len elements and checks the result.
func checkAxpy(t *testing.T, n, size int) error {
	t.Helper()
	x := make([]float64, size)
	y := make([]float64, size)
	for i := range x {
		x[i], y[i] = float64(i), float64(n)
	}
	if err := offload.On(n).Run(axpyK, 2.0, offload.To(x).Named("x"), offload.ToFrom(y).Named("y")); err != nil {
		return err
	}
	for i := range y {
		if want := float64(n) + 2*float64(i); y[i] != want {
			t.Fatalf("device %d: y[%d] = %v, want %v", n, i, y[i], want)
		}
	}
	return nil
}

// TestTwoMachines: a host here offloads to tcp:// devices in two machines,
// each kernel runs in the process of its machine, and the results are
// right, with tasks on both at once.
func TestTwoMachines(t *testing.T) {
	b := testbed.New(t, 2)
	devs := startDevices(t, b)
	for n, d := range devs {
		info, err := offload.On(n).Info()
		if err != nil {
			t.Fatal(err)
		}
		if info.Kind != "tcp" || info.Spec != d.Spec {
			t.Errorf("device %d: kind %q, spec %q; want tcp, %q", n, info.Kind, info.Spec, d.Spec)
		}
		pid := []int64{0}
		if err := offload.On(n).Run(whoK, offload.From(pid)); err != nil {
			t.Fatal(err)
		}
		if pid[0] != int64(d.PID) {
			t.Errorf("device %d ran in pid %d, want %d (the process in %v)", n, pid[0], d.PID, d.Machine)
		}
		if err := checkAxpy(t, n, 1<<16+3); err != nil {
			t.Fatal(err)
		}
	}
	// Tasks on both devices at once, each with its own data.
	const tasks = 8
	xs := make([][]float64, tasks)
	ys := make([][]float64, tasks)
	var g offload.Group
	for k := range tasks {
		xs[k], ys[k] = make([]float64, 4096), make([]float64, 4096)
		for i := range xs[k] {
			xs[k][i] = float64(k + i)
		}
		offload.On(k%2).Nowait().In(&g).Run(axpyK, 3.0, offload.To(xs[k]), offload.ToFrom(ys[k]))
	}
	if err := g.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	for k := range tasks {
		for i, v := range ys[k] {
			if want := 3 * float64(k+i); v != want {
				t.Fatalf("task %d: y[%d] = %v, want %v", k, i, v, want)
			}
		}
	}
}

// TestCutLink: a machine's link cut while a kernel runs there makes that
// kernel's task, and later constructs on that device, fail with an error
// naming the device, within GOFFLOAD_DEVICE_TIMEOUT (nothing hangs); the
// device in the other machine goes on working. Healed, the device process
// (which lived on) serves a new host.
func TestCutLink(t *testing.T) {
	const timeout = 2 * time.Second
	t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", timeout.String())
	b := testbed.New(t, 2)
	devs := startDevices(t, b)
	if err := checkAxpy(t, 1, 1024); err != nil {
		t.Fatal(err)
	}
	x := make([]float64, 1024)
	task := offload.On(1).Nowait().Run(holdK, int64(60_000), offload.ToFrom(x))
	cut := time.Now()
	if err := b.Machine(1).Cut(); err != nil {
		t.Fatal(err)
	}
	// A bound that only a hang reaches: the timeout, its heartbeats, and a
	// loaded machine's -race run.
	ctx, cancel := context.WithTimeout(context.Background(), timeout+20*time.Second)
	defer cancel()
	err := task.WaitContext(ctx)
	lost := time.Since(cut)
	if ctx.Err() != nil {
		t.Fatalf("the task on the cut machine still waits %v after the cut (GOFFLOAD_DEVICE_TIMEOUT=%v): %v", lost, timeout, err)
	}
	t.Logf("the cut device was lost %v after the cut (GOFFLOAD_DEVICE_TIMEOUT=%v): %v", lost.Round(time.Millisecond), timeout, err)
	checkLost(t, err, devs[1])

	// The other machine's device goes on.
	if err := checkAxpy(t, 0, 1<<16); err != nil {
		t.Errorf("device 0, after device 1 was lost: %v", err)
	}
	// Later constructs on the lost device fail at once, naming it.
	start := time.Now()
	err = checkAxpy(t, 1, 16)
	if d := time.Since(start); d > timeout {
		t.Errorf("a construct on the lost device took %v to fail", d)
	}
	checkLost(t, err, devs[1])
	if _, err := offload.On(1).Info(); !errors.Is(err, offload.ErrDeviceLost) {
		t.Errorf("Info of the lost device: %v, want ErrDeviceLost", err)
	}

	// Healed: the device process lived through the cut, and serves a new
	// host as before.
	if err := b.Machine(1).Heal(); err != nil {
		t.Fatal(err)
	}
	if err := offload.Stop(); err != nil {
		t.Logf("Stop after the loss: %v", err)
	}
	select {
	case <-devs[1].Done():
		t.Fatalf("the device process in the cut machine ended: %v\n%s", devs[1].Exit(), devs[1].Output())
	default:
	}
	if err := offload.Start(offload.WithDevices(devs[0].Spec + "," + devs[1].Spec)); err != nil {
		t.Fatal(err)
	}
	for n := range devs {
		if err := checkAxpy(t, n, 4096); err != nil {
			t.Errorf("device %d after healing, with a new host: %v", n, err)
		}
	}
}

// checkLost fails t unless err says that the device d was lost, naming it.
func checkLost(t *testing.T, err error, d *testbed.Device) {
	t.Helper()
	if !errors.Is(err, offload.ErrDeviceLost) || !strings.Contains(err.Error(), d.Addr) {
		t.Errorf("got %v; want ErrDeviceLost naming %s", err, d.Spec)
	}
}

// TestSlowLink: a slowed link gives the same results, and moves bulk data
// measurably slower (a sanity check of the limit with a generous bound,
// not a timing of the runtime).
func TestSlowLink(t *testing.T) {
	const rate = 32_000_000 // bits per second: 4 MB/s
	b := testbed.New(t, 2)
	startDevices(t, b)
	if err := b.Machine(1).Slow(rate); err != nil {
		t.Fatal(err)
	}
	for n := range 2 {
		if err := checkAxpy(t, n, 1<<16+5); err != nil {
			t.Fatal(err)
		}
	}
	// The time to map 2 MiB to each device, and back.
	buf := make([]float64, 1<<18)
	for i := range buf {
		buf[i] = float64(i)
	}
	bw := make([]float64, 2)
	for n := range 2 {
		d := offload.On(n)
		start := time.Now()
		if err := d.EnterData(offload.To(buf)); err != nil {
			t.Fatal(err)
		}
		clear(buf)
		if err := d.ExitData(offload.From(buf)); err != nil {
			t.Fatal(err)
		}
		el := time.Since(start)
		for i, v := range buf {
			if v != float64(i) {
				t.Fatalf("device %d: buf[%d] = %v after a round trip, want %d", n, i, v, i)
			}
		}
		bw[n] = 2 * 8 * float64(len(buf)) / el.Seconds() // bytes per second, both ways
		t.Logf("device %d: 2 MiB there and back in %v: %.1f MB/s", n, el.Round(time.Millisecond), bw[n]/1e6)
	}
	if limit := float64(rate) / 8; bw[1] > 2*limit {
		t.Errorf("the slowed link moved %.1f MB/s, over twice its limit (%.1f MB/s)", bw[1]/1e6, limit/1e6)
	}
	if bw[0] < 2*bw[1] {
		t.Errorf("the link that is not slowed moved %.1f MB/s, under twice the slowed one's %.1f MB/s", bw[0]/1e6, bw[1]/1e6)
	}
	// The limit lifted, the device goes on.
	if err := b.Machine(1).Slow(0); err != nil {
		t.Fatal(err)
	}
	if err := checkAxpy(t, 1, 1<<16); err != nil {
		t.Fatal(err)
	}
}
